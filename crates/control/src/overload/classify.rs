//! Which requests overload control may reduce, and in which order.
//!
//! RFC 7339 leaves the choice of requests to reduce to local policy and asks that
//! requests whose loss would waste work already done, or that matter more, go last. The
//! policy here: requests within an established dialog (ACK, BYE, re-INVITE, any request
//! with a To tag) and CANCEL are never reduced (dropping them wastes the session already
//! admitted, or keeps load that the CANCEL would remove); priority requests
//! (Resource-Priority, RFC 4412; emergency service URNs, RFC 5031) are reduced only when
//! nothing else is left to reduce; everything else is reduced first.
//!
//! The driver fills a [`RequestTraits`] from the parsed message; nothing here sees it.

/// The request methods the policy distinguishes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RequestMethod {
    Invite,
    Ack,
    Cancel,
    Bye,
    Other,
}

/// What the policy needs to know about one request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RequestTraits {
    pub method: RequestMethod,
    /// The To header has a tag: the request belongs to an established dialog.
    pub in_dialog: bool,
    /// Resource-Priority is present, or the Request-URI is an SOS URN ([`is_sos_urn`]).
    pub priority: bool,
}

/// How a request ranks for reduction; RFC 7339 §7.2 calls the two reducible ranks
/// category 1 and category 2.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Reduction {
    /// Category 1: reduced first.
    Normal,
    /// Category 2: reduced only once every category 1 request is.
    Priority,
    /// Never reduced.
    Exempt,
}

impl RequestTraits {
    /// An initial (out-of-dialog) INVITE.
    pub fn initial_invite(priority: bool) -> Self {
        Self {
            method: RequestMethod::Invite,
            in_dialog: false,
            priority,
        }
    }

    pub fn reduction(&self) -> Reduction {
        if self.in_dialog
            || matches!(
                self.method,
                RequestMethod::Ack | RequestMethod::Cancel | RequestMethod::Bye
            )
        {
            Reduction::Exempt
        } else if self.priority {
            Reduction::Priority
        } else {
            Reduction::Normal
        }
    }

    /// Whether the request starts a session (what the window extension counts).
    pub fn starts_session(&self) -> bool {
        self.method == RequestMethod::Invite && !self.in_dialog
    }
}

/// Whether a Request-URI is an emergency service URN, `urn:service:sos` or one of its
/// sub-services (`urn:service:sos.police`), RFC 5031 §4.2. Case-insensitive, as URN
/// schemes and service labels are.
pub fn is_sos_urn(request_uri: &[u8]) -> bool {
    const SOS: &[u8] = b"urn:service:sos";
    request_uri.len() >= SOS.len()
        && request_uri[..SOS.len()].eq_ignore_ascii_case(SOS)
        && matches!(request_uri.get(SOS.len()), None | Some(b'.'))
}
