//! What the live proxy tests share.
#![allow(dead_code)]

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc};

use sluice_load::shell::{bind_udp, run_uas, Stop};
use sluice_load::UasConfig;
use sluice_proxy::{Proxy, ProxyConfig, ProxyReport, ShutdownHandle};

/// sluice's UAS on its own thread, answering every INVITE with 200.
pub struct Uas {
    pub addr: SocketAddr,
    stop: Arc<AtomicBool>,
    thread: std::thread::JoinHandle<std::io::Result<()>>,
}

impl Uas {
    pub fn start_on(at: SocketAddr) -> Uas {
        let socket = bind_udp(at).unwrap();
        let addr = socket.local_addr().unwrap();
        let stop = Arc::<AtomicBool>::default();
        let flag = Stop {
            flag: Some(stop.clone()),
            ..Stop::default()
        };
        let thread =
            std::thread::spawn(move || run_uas(socket, UasConfig::new(addr), &flag).map(|_| ()));
        Uas { addr, stop, thread }
    }

    pub fn finish(self) {
        self.stop.store(true, Ordering::Relaxed);
        self.thread.join().unwrap().unwrap();
    }
}

/// A proxy on its own thread: its address, stop handle, admin address and report.
pub struct Running {
    pub addr: SocketAddr,
    pub admin: Option<SocketAddr>,
    pub stop: ShutdownHandle,
    pub thread: std::thread::JoinHandle<ProxyReport>,
}

impl Running {
    pub fn start(config: ProxyConfig) -> Running {
        let (tx, rx) = mpsc::channel();
        let thread = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            rt.block_on(async move {
                let proxy = Proxy::bind(config).await.unwrap();
                tx.send((
                    proxy.local_addr(),
                    proxy.admin_addr(),
                    proxy.shutdown_handle(),
                ))
                .unwrap();
                proxy.run().await.unwrap()
            })
        });
        let (addr, admin, stop) = rx.recv().unwrap();
        Running {
            addr,
            admin,
            stop,
            thread,
        }
    }

    pub fn finish(self) -> ProxyReport {
        self.stop.shutdown();
        self.thread.join().unwrap()
    }
}
