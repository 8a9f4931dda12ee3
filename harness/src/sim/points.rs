//! Named crash points: the semantic moments in worker code where a crash or an injected
//! failure can happen, and that label crash sites in traces.

use std::fmt;
use std::str::FromStr;

/// A named place in worker code, between two service calls.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum CrashPoint {
    /// Consumer: a message was received, nothing else happened yet.
    AfterReceive,
    /// Consumer: the `processed_message` claim returned.
    AfterClaim,
    /// Consumer: the business insert (`merchant_payout`) returned.
    AfterBusinessInsert,
    /// Consumer: the transaction committed; DeleteMessage has not been called (seed 000's
    /// opening scenario).
    AfterCommit,
    /// Consumer: DeleteMessage returned.
    AfterDelete,
    /// Relay: unpublished outbox rows were selected `FOR UPDATE SKIP LOCKED`.
    RelayAfterSelect,
    /// Relay: SendMessage returned; `published_at` is not yet set.
    RelayAfterSend,
    /// Relay: `published_at` was set; the transaction has not committed.
    RelayAfterMark,
    /// Producer: the Redis dedup lock was taken; nothing was sent.
    AfterLock,
    /// Producer: SendMessage returned.
    AfterSend,
}

impl CrashPoint {
    /// Every crash point, in pipeline order.
    pub const ALL: [CrashPoint; 10] = [
        CrashPoint::AfterLock,
        CrashPoint::AfterSend,
        CrashPoint::AfterReceive,
        CrashPoint::AfterClaim,
        CrashPoint::AfterBusinessInsert,
        CrashPoint::AfterCommit,
        CrashPoint::AfterDelete,
        CrashPoint::RelayAfterSelect,
        CrashPoint::RelayAfterSend,
        CrashPoint::RelayAfterMark,
    ];

    /// The name used in schedules and traces, e.g. `after_commit`.
    pub fn as_str(self) -> &'static str {
        match self {
            CrashPoint::AfterReceive => "after_receive",
            CrashPoint::AfterClaim => "after_claim",
            CrashPoint::AfterBusinessInsert => "after_business_insert",
            CrashPoint::AfterCommit => "after_commit",
            CrashPoint::AfterDelete => "after_delete",
            CrashPoint::RelayAfterSelect => "relay_after_select",
            CrashPoint::RelayAfterSend => "relay_after_send",
            CrashPoint::RelayAfterMark => "relay_after_mark",
            CrashPoint::AfterLock => "after_lock",
            CrashPoint::AfterSend => "after_send",
        }
    }

    /// Which worker role passes through this point: `producer`, `consumer` or `relay`.
    pub fn role(self) -> &'static str {
        match self {
            CrashPoint::AfterLock | CrashPoint::AfterSend => "producer",
            CrashPoint::RelayAfterSelect | CrashPoint::RelayAfterSend | CrashPoint::RelayAfterMark => {
                "relay"
            }
            _ => "consumer",
        }
    }
}

impl fmt::Display for CrashPoint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for CrashPoint {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        CrashPoint::ALL.iter().copied().find(|c| c.as_str() == s).ok_or_else(|| {
            let names: Vec<&str> = CrashPoint::ALL.iter().map(|c| c.as_str()).collect();
            format!("unknown crash point `{s}`; expected one of {}", names.join(", "))
        })
    }
}
