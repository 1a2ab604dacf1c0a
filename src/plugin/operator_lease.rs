//! Whether the operator runs, as told by its leader-election Lease: a leader renews it every
//! few seconds, so a Lease not renewed within its duration means no operator is acting. Pure.

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::jiff::Timestamp;

use super::status_view::OperatorState;

/// The state the freshest of `leases` tells (several when several installs share a name).
pub(crate) fn operator_state(leases: &[Lease], now: Timestamp) -> OperatorState {
    let freshest = leases
        .iter()
        .filter_map(|l| Some((l, l.spec.as_ref()?)))
        .max_by_key(|(_, s)| s.renew_time.as_ref().map(|t| t.0));
    let Some((lease, spec)) = freshest else {
        return OperatorState::Unknown {
            detail: "no leader-election Lease found (an operator without leader election, or another --lease-name: pass --lease NAMESPACE/NAME)".into(),
        };
    };
    let at = format!(
        "{}/{}",
        lease.metadata.namespace.as_deref().unwrap_or(""),
        lease.metadata.name.as_deref().unwrap_or("")
    );
    let holder = spec.holder_identity.clone().filter(|h| !h.is_empty());
    let Some(holder) = holder else {
        return OperatorState::NotRunning {
            detail: format!("Lease {at} has no holder (the last leader released it)"),
        };
    };
    let Some(renewed) = spec.renew_time.as_ref().map(|t| t.0) else {
        return OperatorState::NotRunning {
            detail: format!("Lease {at} held by {holder} was never renewed"),
        };
    };
    let ago = now.duration_since(renewed).as_secs_f64();
    let duration = f64::from(spec.lease_duration_seconds.unwrap_or(15));
    if ago > duration {
        OperatorState::NotRunning {
            detail: format!(
                "Lease {at} held by {holder} was last renewed {ago:.0}s ago (lease duration {duration:.0}s): no operator replica is acting"
            ),
        }
    } else {
        OperatorState::Running {
            holder,
            renewed_seconds_ago: ago.max(0.0),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lease(holder: Option<&str>, renewed: Option<i64>) -> Lease {
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": "redlock-operator", "namespace": "ops"},
            "spec": {
                "holderIdentity": holder,
                "leaseDurationSeconds": 15,
                "renewTime": renewed.map(|s| format!("{}", Timestamp::from_second(s).unwrap())),
            }
        }))
        .unwrap()
    }

    #[test]
    fn fresh_stale_released_and_missing_leases() {
        let now = Timestamp::from_second(1_000).unwrap();
        assert!(matches!(
            operator_state(&[lease(Some("op-a"), Some(998))], now),
            OperatorState::Running { ref holder, .. } if holder == "op-a"
        ));
        let OperatorState::NotRunning { detail } = operator_state(&[lease(Some("op-a"), Some(900))], now)
        else {
            panic!()
        };
        assert!(detail.contains("100s ago"), "{detail}");
        assert!(matches!(
            operator_state(&[lease(None, Some(999))], now),
            OperatorState::NotRunning { .. }
        ));
        assert!(matches!(operator_state(&[], now), OperatorState::Unknown { .. }));
        // The freshest of several wins.
        assert!(matches!(
            operator_state(&[lease(Some("old"), Some(100)), lease(Some("new"), Some(999))], now),
            OperatorState::Running { ref holder, .. } if holder == "new"
        ));
    }
}
