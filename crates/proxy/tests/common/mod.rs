//! What the live proxy tests share.
#![allow(dead_code)]

use std::net::SocketAddr;
use std::sync::mpsc;

use sluice_proxy::{Proxy, ProxyConfig, ProxyReport, ShutdownHandle};

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
