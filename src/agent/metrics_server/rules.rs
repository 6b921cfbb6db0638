//! Pure choices of the metrics server ([`super`]): which Node, which address.

use std::net::IpAddr;

use k8s_openapi::api::core::v1::Node;

/// The one Node of a host-name lookup; `None` for none or several (the agent's main loop says
/// why; the metrics server just waits).
pub fn only_node(nodes: &[Node]) -> Option<&Node> {
    match nodes {
        [node] => Some(node),
        _ => None,
    }
}

/// The Node's first `InternalIP` that parses as an IP address and is neither unspecified,
/// loopback nor multicast (the API server's node proxy refuses loopback and link-local
/// addresses; a node reporting one gets no listener rather than one on all interfaces).
pub fn internal_ip(node: &Node) -> Option<IpAddr> {
    node.status
        .as_ref()?
        .addresses
        .as_ref()?
        .iter()
        .filter(|address| address.type_ == "InternalIP")
        .filter_map(|address| address.address.trim().parse::<IpAddr>().ok())
        .find(|ip| !ip.is_unspecified() && !ip.is_loopback() && !ip.is_multicast())
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{NodeAddress, NodeStatus};

    fn node(addresses: &[(&str, &str)]) -> Node {
        Node {
            status: Some(NodeStatus {
                addresses: Some(
                    addresses
                        .iter()
                        .map(|(type_, address)| NodeAddress {
                            type_: type_.to_string(),
                            address: address.to_string(),
                        })
                        .collect(),
                ),
                ..NodeStatus::default()
            }),
            ..Node::default()
        }
    }

    #[test]
    fn the_first_usable_internal_ip_is_chosen() {
        let n = node(&[
            ("Hostname", "node-a"),
            ("InternalIP", "not an address"),
            ("InternalIP", "127.0.0.1"),
            ("InternalIP", "0.0.0.0"),
            ("ExternalIP", "203.0.113.7"),
            ("InternalIP", "10.250.0.4"),
            ("InternalIP", "fd00::4"),
        ]);
        assert_eq!(internal_ip(&n), "10.250.0.4".parse().ok());
        assert_eq!(
            internal_ip(&node(&[("InternalIP", "fd00::4")])),
            "fd00::4".parse().ok()
        );
    }

    #[test]
    fn no_internal_ip_no_address() {
        assert_eq!(internal_ip(&node(&[("ExternalIP", "203.0.113.7")])), None);
        assert_eq!(internal_ip(&Node::default()), None);
    }

    #[test]
    fn only_one_node_counts() {
        assert!(only_node(&[]).is_none());
        assert!(only_node(&[Node::default(), Node::default()]).is_none());
        assert!(only_node(&[Node::default()]).is_some());
    }
}
