//! The Node's lost internal IP (pure): gardener-node-agent v1.149.3's `ensureNodeInternalIP`
//! (`pkg/nodeagent/controller/healthcheck/kubelet.go`). kubelet may start without the Node's
//! addresses (a cloud provider API that timed out); the agent remembers the last internal IP
//! it saw and, when the Node has neither an internal nor an external address and that IP is
//! still on the machine, writes it back. [`super::steps`] reads the Node, asks the machine and
//! writes the status; the wording of the events is GNA's.

use std::net::IpAddr;

use k8s_openapi::api::core::v1::Node;

/// What the Node's addresses call for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AddressCheck {
    /// An internal IP is there: remember it.
    Remember(IpAddr),
    /// An external address (or an internal one that is no IP) is there: nothing to do.
    Fine,
    /// Neither an internal nor an external address.
    Lost,
}

/// Looks at the Node's `status.addresses`.
pub fn check(node: &Node) -> AddressCheck {
    let addresses = node
        .status
        .as_ref()
        .and_then(|status| status.addresses.as_deref())
        .unwrap_or_default();
    let of_type = |type_: &str| {
        addresses
            .iter()
            .filter(|a| a.type_ == type_)
            .map(|a| a.address.as_str())
            .find(|a| !a.is_empty())
    };
    match (of_type("InternalIP"), of_type("ExternalIP")) {
        (None, None) => AddressCheck::Lost,
        (Some(internal), _) => internal
            .parse()
            .map_or(AddressCheck::Fine, AddressCheck::Remember),
        (None, Some(_)) => AddressCheck::Fine,
    }
}

/// The Warning event when the addresses are gone (GNA's text).
pub fn lost_note(last: Option<IpAddr>) -> String {
    match last {
        Some(ip) => format!(
            "Node status does neither have an internal nor an external IP, try to recover from last known internal IP: {ip}"
        ),
        None => "Node status does neither have an internal nor an external IP".to_string(),
    }
}

/// The Normal event once the IP is written back (GNA's text, its trailing space included).
pub fn restored_note(ip: IpAddr) -> String {
    format!("Updated the lost internal IP address of node status to the previous known: {ip} ")
}

/// The Warning event when writing it back failed (then kubelet is restarted, as GNA does).
pub fn restore_failed_note(error: &str) -> String {
    format!("Unable to update node status with internal IP: {error}")
}

/// The merge patch of `nodes/status` that puts `ip` back as the only address, conditional on
/// the Node's `resource_version` (a Node changed since it was read answers 409, as GNA's
/// update does).
pub fn restore_patch(ip: IpAddr, resource_version: &str) -> serde_json::Value {
    serde_json::json!({
        "metadata": {"resourceVersion": resource_version},
        "status": {"addresses": [{"type": "InternalIP", "address": ip.to_string()}]},
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn node(addresses: serde_json::Value) -> Node {
        serde_json::from_value(
            json!({"metadata": {"name": "n"}, "status": {"addresses": addresses}}),
        )
        .unwrap()
    }

    #[test]
    fn an_internal_ip_is_remembered_and_only_no_address_at_all_counts_as_lost() {
        let internal = node(
            json!([{"type": "Hostname", "address": "n"}, {"type": "InternalIP", "address": "10.0.0.7"}]),
        );
        assert_eq!(
            check(&internal),
            AddressCheck::Remember("10.0.0.7".parse().unwrap())
        );
        let external = node(json!([{"type": "ExternalIP", "address": "1.2.3.4"}]));
        assert_eq!(check(&external), AddressCheck::Fine);
        let hostname_only = node(json!([{"type": "Hostname", "address": "n"}]));
        assert_eq!(check(&hostname_only), AddressCheck::Lost);
        assert_eq!(check(&node(json!([]))), AddressCheck::Lost);
        let no_status: Node = serde_json::from_value(json!({"metadata": {"name": "n"}})).unwrap();
        assert_eq!(check(&no_status), AddressCheck::Lost);
        let not_an_ip = node(json!([{"type": "InternalIP", "address": "n.example"}]));
        assert_eq!(check(&not_an_ip), AddressCheck::Fine);
    }

    #[test]
    fn the_notes_are_gna_s_and_the_patch_is_conditional() {
        let ip: IpAddr = "10.0.0.7".parse().unwrap();
        assert_eq!(
            lost_note(Some(ip)),
            "Node status does neither have an internal nor an external IP, try to recover from last known internal IP: 10.0.0.7"
        );
        assert_eq!(
            lost_note(None),
            "Node status does neither have an internal nor an external IP"
        );
        assert_eq!(
            restored_note(ip),
            "Updated the lost internal IP address of node status to the previous known: 10.0.0.7 "
        );
        assert_eq!(
            restore_patch(ip, "42"),
            json!({"metadata": {"resourceVersion": "42"},
                   "status": {"addresses": [{"type": "InternalIP", "address": "10.0.0.7"}]}})
        );
    }
}
