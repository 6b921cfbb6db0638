//! e2e: the node agent's client certificate (`docs/agent.md#client-certificate`) on a real
//! systemd machine (`support/nspawn.rs`), against the components a Gardener shoot has for it:
//! kube-apiserver with bootstrap-token authentication, kube-controller-manager's
//! `kubernetes.io/kube-apiserver-client` signer (certificates of [`SIGNING`], so renewals come
//! within the test) and gardener-resource-manager's real CSR approver, which finds the Machine
//! in the seed namespace (`support::shoot::Shoot::start_for_node_agents`). The tests play
//! machine-controller-manager (the bootstrap token Secret, the Machine, the `machine-name`
//! file) and kubelet (they create the Node).
//!
//! The shoot authorizes the agent as a Gardener shoot does: no RBAC for node agents, GRM's
//! node-agent authorizer webhook decides by the Machine (its node-template label names the
//! OSC Secret) and the Node (created with gardenlet's pool labels, as kubelet registers it).

#![allow(clippy::unwrap_used, clippy::panic)]

#[path = "support/mcm_in_place.rs"]
mod mcm_in_place;
mod support;

use std::time::{Duration, Instant};

use gardener_extension_node::agent::client_certificate::rules::client_certificate;
use gardener_extension_node::kubeconfig::x509::{CertificateFacts, first_certificate_facts};
use k8s_openapi::api::certificates::v1::CertificateSigningRequest;
use k8s_openapi::api::coordination::v1::Lease;
use kube::Api;
use kube::config::Kubeconfig;
use serde_json::json;
use support::agent::*;
use support::node_agent_identity::{
    allow_bootstrappers, create_bootstrap_token, create_machine, create_pool_node,
};
use support::shoot::Shoot;

const BIN: &str = env!("CARGO_BIN_EXE_gardener-extension-node");
/// kube-controller-manager's `--cluster-signing-duration`. Certificates this short are
/// backdated by 5 min (`notAfter = now + 90 s`, `notBefore = now - 5 min`), so with GNA's
/// 80–88 % rule a renewal comes 12–43 s after each issue.
const SIGNING: Duration = Duration::from_secs(90);
const STEP_TIMEOUT: Duration = Duration::from_secs(120);
const KUBECONFIG: &str = "/var/lib/gardener-node-agent/credentials/kubeconfig";
const BOOTSTRAP_TOKEN: &str = "/var/lib/gardener-node-agent/credentials/bootstrap-token";
const MACHINE_NAME: &str = "/var/lib/gardener-node-agent/machine-name";
const KUBELET_BOOTSTRAP: &str = "/var/lib/kubelet/kubeconfig-bootstrap";

/// A new machine with its OSC secret, what MCM and gardener give a shoot for it, and its
/// agent not started yet.
struct NewMachine {
    shoot: Shoot,
    shoot_client: kube::Client,
    machine: support::nspawn::Machine,
    machine_name: String,
    record: MachineRecord,
    setup: AgentSetup,
    checksum: String,
}

async fn new_machine() -> NewMachine {
    new_machine_signing(SIGNING).await
}

/// [`new_machine`] with certificates of `signing`.
async fn new_machine_signing(signing: Duration) -> NewMachine {
    let env = support::env().await;
    new_machine_in(&env, Shoot::start_for_node_agents(&env, signing).await).await
}

/// A new machine with its OSC secret in `shoot`, whose Machine goes into `env`'s namespace.
async fn new_machine_in(env: &support::TestEnv, shoot: Shoot) -> NewMachine {
    let shoot_client = shoot.client().await;
    allow_bootstrappers(&shoot_client).await;
    let machine = boot(BIN);
    let node = machine.name().to_string();
    let machine_name = format!("machine-{node}");
    let secret = format!("gardener-node-agent-{node}");
    let checksum = put_osc(
        &shoot_client,
        &secret,
        &osc_yaml(&[service("app.service", "first")], &[], None),
    )
    .await;
    let setup = AgentSetup {
        secret_name: secret.clone(),
        kubeconfig: String::new(),
        server_url: shoot.server_url(),
        ca_pem: shoot.ca_pem(),
        drift_interval: "10m".into(),
        token_sync: Vec::new(),
        binary_in_machine: BIN_IN_MACHINE.to_string(),
    };
    let record = MachineRecord {
        seed: env.client.clone(),
        namespace: env.namespace.clone(),
        name: machine_name.clone(),
        node: node.clone(),
        osc_secret: secret.clone(),
    };
    NewMachine {
        record,
        shoot,
        shoot_client,
        machine,
        machine_name,
        setup,
        checksum,
    }
}

/// The Machine MCM would create for the new machine in the seed namespace.
struct MachineRecord {
    seed: kube::Client,
    namespace: String,
    name: String,
    node: String,
    osc_secret: String,
}

impl MachineRecord {
    /// Creates it, joined as the machine's Node.
    async fn create(&self) {
        create_machine(
            &self.seed,
            &self.namespace,
            &self.name,
            &self.node,
            &self.osc_secret,
        )
        .await;
    }
}

/// The serial and validity of the certificate in the machine's `credentials/kubeconfig`.
fn certificate_in(machine: &support::nspawn::Machine) -> Option<CertificateFacts> {
    let text = machine.read_file(KUBECONFIG).ok()?;
    let kubeconfig = Kubeconfig::from_yaml(&String::from_utf8_lossy(&text)).ok()?;
    first_certificate_facts(&client_certificate(&kubeconfig)?)
}

fn exists(machine: &support::nspawn::Machine, path: &str) -> bool {
    machine.run(&["test", "-e", path]).status.success()
}

async fn wait_until(what: &str, agent: &AgentMachine, mut check: impl FnMut() -> bool) -> Duration {
    let started = Instant::now();
    while !check() {
        assert!(
            started.elapsed() < STEP_TIMEOUT,
            "{what}: not within {STEP_TIMEOUT:?}; agent log:\n{}",
            agent.log()
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    started.elapsed()
}

/// Starts the agent of a new machine with what MCM's user data gives it: a new bootstrap token
/// and the machine name. Returns the agent once its certificate is issued, the token, and how
/// long the certificate took from the agent's start.
async fn start_with_bootstrap_token(
    shoot: &kube::Client,
    machine: support::nspawn::Machine,
    machine_name: &str,
    setup: &AgentSetup,
) -> (AgentMachine, String, Duration) {
    let token = create_bootstrap_token(shoot, Duration::from_secs(3600)).await;
    let credentials = [
        (BOOTSTRAP_TOKEN.to_string(), format!("{token}\n")),
        (MACHINE_NAME.to_string(), format!("{machine_name}\n")),
    ];
    let port = install_agent_with(&machine, setup, &credentials);
    let agent = AgentMachine::started(machine, port);
    let issued_after = wait_until("certificate issued", &agent, || {
        certificate_in(&agent.machine).is_some()
    })
    .await;
    (agent, token, issued_after)
}

/// [`start_with_bootstrap_token`], then the Node registers (as kubelet would) and the agent
/// reports `checksum` on it.
async fn start_and_join(
    shoot: &kube::Client,
    machine: support::nspawn::Machine,
    machine_name: &str,
    setup: &AgentSetup,
    checksum: &str,
) -> AgentMachine {
    let node = machine.name().to_string();
    let (agent, _, _) = start_with_bootstrap_token(shoot, machine, machine_name, setup).await;
    create_pool_node(shoot, &node, &setup.secret_name).await;
    wait_for_checksum(shoot, &agent, checksum, STEP_TIMEOUT).await;
    agent
}

/// The first boot of a machine that has only a bootstrap token: the agent writes kubelet's
/// bootstrap kubeconfig, gets its certificate through GRM's approver and KCM's signer, applies
/// its OSC once the Node is there and removes the bootstrap files; then it renews the
/// certificate twice without any restart, and still works once the first certificate has
/// expired (its Lease is renewed, a new OSC is applied).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_machine_trades_its_bootstrap_token_for_a_certificate_and_renews_it_in_place() {
    let started = Instant::now();
    let new = new_machine().await;
    let node = new.machine.name().to_string();
    new.record.create().await;
    let booted = started.elapsed();
    let (agent, token, issued_after) = start_with_bootstrap_token(
        &new.shoot_client,
        new.machine,
        &new.machine_name,
        &new.setup,
    )
    .await;

    // 1. kubelet's bootstrap kubeconfig carries the token; the certificate is issued.
    let kubelet_bootstrap =
        String::from_utf8(agent.machine.read_file(KUBELET_BOOTSTRAP).unwrap()).unwrap();
    assert!(
        kubelet_bootstrap.contains(&format!("token: {token}")),
        "{kubelet_bootstrap}"
    );
    assert_eq!(agent.mode(KUBELET_BOOTSTRAP), "600");
    let first = certificate_in(&agent.machine).unwrap();
    assert_eq!(agent.mode(KUBECONFIG), "600");
    let csrs = Api::<CertificateSigningRequest>::all(new.shoot_client.clone())
        .list(&Default::default())
        .await
        .unwrap()
        .items;
    let ours: Vec<_> = csrs
        .iter()
        .filter(|csr| {
            csr.spec
                .username
                .as_deref()
                .is_some_and(|u| u.starts_with("system:bootstrap:"))
        })
        .collect();
    assert_eq!(ours.len(), 1, "one request with the bootstrap token");
    let approved = ours[0]
        .status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .and_then(|c| c.iter().find(|c| c.type_ == "Approved"))
        .and_then(|c| c.reason.clone());
    assert_eq!(
        approved.as_deref(),
        Some("RequestApproved"),
        "GRM approved it"
    );
    // The bootstrap files stay until the Node exists and an OSC is applied.
    assert!(exists(&agent.machine, BOOTSTRAP_TOKEN));

    // 2. The Node registers: the OSC is applied, the bootstrap files go.
    create_pool_node(&new.shoot_client, &node, &new.setup.secret_name).await;
    wait_for_checksum(&new.shoot_client, &agent, &new.checksum, STEP_TIMEOUT).await;
    let applied_after = started.elapsed();
    wait_until("bootstrap files removed", &agent, || {
        !exists(&agent.machine, BOOTSTRAP_TOKEN) && !exists(&agent.machine, KUBELET_BOOTSTRAP)
    })
    .await;

    // 3. Renewals: new serials, the same process.
    let invocation = agent.invocation(AGENT_UNIT);
    let mut serials = vec![first.serial.clone()];
    let mut renewals = Vec::new();
    while serials.len() < 3 {
        let since = Instant::now();
        wait_until("certificate renewed", &agent, || {
            certificate_in(&agent.machine).is_some_and(|c| !serials.contains(&c.serial))
        })
        .await;
        renewals.push(since.elapsed());
        serials.push(certificate_in(&agent.machine).unwrap().serial);
    }
    assert_eq!(
        agent.invocation(AGENT_UNIT),
        invocation,
        "no restart of the agent"
    );
    assert!(
        agent
            .log()
            .contains("API client switched to the renewed credentials")
    );

    // 4. Past the first certificate's end: the Lease is renewed and a new OSC applied.
    let now = chrono::Utc::now().timestamp();
    if now <= first.not_after + 5 {
        tokio::time::sleep(Duration::from_secs((first.not_after + 5 - now) as u64)).await;
    }
    let leases = Api::<Lease>::namespaced(new.shoot_client.clone(), "kube-system");
    let lease_name = format!("gardener-node-agent-{node}");
    let renewed_before = leases
        .get(&lease_name)
        .await
        .unwrap()
        .spec
        .unwrap()
        .renew_time;
    let checksum = put_osc(
        &new.shoot_client,
        &new.setup.secret_name,
        &osc_yaml(&[service("app.service", "second")], &[], None),
    )
    .await;
    wait_for_checksum(&new.shoot_client, &agent, &checksum, STEP_TIMEOUT).await;
    let deadline = Instant::now() + STEP_TIMEOUT;
    while leases
        .get(&lease_name)
        .await
        .unwrap()
        .spec
        .unwrap()
        .renew_time
        == renewed_before
    {
        assert!(
            Instant::now() < deadline,
            "Lease not renewed; agent log:\n{}",
            agent.log()
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    assert_eq!(
        agent.invocation(AGENT_UNIT),
        invocation,
        "no restart of the agent"
    );
    eprintln!(
        "certificate e2e timeline: shoot control plane and machine up {:.1} s; certificate issued {:.1} s after the agent started; OSC applied {:.1} s after the beginning; renewals after {:?} (serials {serials:?}); first certificate valid {} s",
        booted.as_secs_f64(),
        issued_after.as_secs_f64(),
        applied_after.as_secs_f64(),
        renewals,
        first.not_after - first.not_before,
    );
    drop(new.shoot);
}

/// Bad input on the way to the first certificate: a bootstrap token the API server does not
/// accept, then a request GRM denies (no Machine in the seed). Each is a log line and a retry,
/// and nothing is written into `credentials/` until a certificate is issued.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rejected_token_and_a_denied_request_are_retried_and_write_nothing() {
    let new = new_machine().await;
    let node = new.machine.name().to_string();
    let credentials = [
        (
            BOOTSTRAP_TOKEN.to_string(),
            "abcdef.0123456789abcdef\n".to_string(),
        ),
        (MACHINE_NAME.to_string(), format!("{}\n", new.machine_name)),
    ];
    let port = install_agent_with(&new.machine, &new.setup, &credentials);
    let agent = AgentMachine::started(new.machine, port);

    // A token nobody issued: 401, retried.
    wait_until("the rejected token logged", &agent, || {
        agent
            .log()
            .contains("getting the client certificate with the bootstrap token failed")
    })
    .await;
    assert!(
        agent.log().contains("(401 Unauthorized)"),
        "{}",
        agent.log()
    );
    assert!(!exists(&agent.machine, KUBECONFIG));

    // A valid token, but no Machine: GRM denies.
    let token = create_bootstrap_token(&new.shoot_client, Duration::from_secs(3600)).await;
    agent
        .machine
        .write_file(BOOTSTRAP_TOKEN, format!("{token}\n").as_bytes(), 0o600)
        .unwrap();
    wait_until("the denial logged", &agent, || {
        agent.log().contains("was denied")
    })
    .await;
    assert!(
        agent.log().contains("does not exist"),
        "GRM's reason is shown"
    );
    assert!(!exists(&agent.machine, KUBECONFIG));
    let listing = agent
        .machine
        .run(&["ls", "-A", "/var/lib/gardener-node-agent/credentials"]);
    assert_eq!(
        listing.stdout.trim(),
        "bootstrap-token",
        "nothing half-written"
    );

    // The Machine appears: the next attempt gets the certificate.
    new.record.create().await;
    wait_until("certificate issued", &agent, || {
        certificate_in(&agent.machine).is_some()
    })
    .await;
    create_pool_node(&new.shoot_client, &node, &new.setup.secret_name).await;
    wait_for_checksum(&new.shoot_client, &agent, &new.checksum, STEP_TIMEOUT).await;
    drop(new.shoot);
}

/// An in-place pool's OSC (Debian 12.7, this test's kubelet version) with `app.service` of
/// `description` and `files`; `ca_rotation` adds a CA rotation started at that time.
fn in_place_osc(
    description: &str,
    files: &[serde_json::Value],
    ca_rotation: Option<&str>,
) -> String {
    let mut osc: serde_json::Value = serde_norway::from_str(&osc_yaml(
        &[service("app.service", description)],
        files,
        None,
    ))
    .unwrap();
    osc["spec"]["inPlaceUpdates"] =
        json!({"operatingSystemVersion": "12.7", "kubelet": KUBERNETES_VERSION});
    if let Some(at) = ca_rotation {
        osc["spec"]["inPlaceUpdates"]["credentialsRotation"] =
            json!({"certificateAuthorities": {"lastInitiationTime": at}});
    }
    serde_norway::to_string(&osc).unwrap()
}

/// A new CA's certificate (PEM), as a CA rotation adds to the bundle.
fn another_ca() -> String {
    let key = rcgen::KeyPair::generate().unwrap();
    let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
    params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    params
        .distinguished_name
        .push(rcgen::DnType::CommonName, "new-kubernetes-ca");
    params.self_signed(&key).unwrap().pem()
}

/// A CA rotation in place (issue 28 item 5) on an agent with a certificate from its bootstrap
/// token: after machine-controller-manager's `ReadyForUpdate` the apply writes the new CA
/// bundle, the agent asks for a new certificate with its current one (GRM approves it for the
/// agent's own user), writes it and switches every client to it without a restart (GNA restarts
/// itself), bootstraps kubelet again and reports the update successful with the new
/// certificate.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_ca_rotation_in_place_gives_the_agent_a_new_certificate_without_a_restart() {
    if !fake_kubelet_healthz() {
        eprintln!("127.0.0.1:10248 is taken (a kubelet on this host?); skipping");
        return;
    }
    // Certificates of an hour: no periodic renewal within the test, so a new serial is the
    // rotation's.
    let new = new_machine_signing(Duration::from_secs(3600)).await;
    let node = new.machine.name().to_string();
    new.record.create().await;
    // A Debian 12.7 node whose kubelet has its own credentials, and a kubelet stand-in.
    new.machine
        .sh("mkdir -p /run/e2e && printf 'PRETTY_NAME=\"Debian GNU/Linux 12 (bookworm)\"\\nID=debian\\nVERSION_ID=\"12\"\\n' > /run/e2e/os-release && ln -sfn /run/e2e/os-release /etc/os-release && echo 12.7 > /etc/debian_version")
        .expect_success("os-release");
    new.machine
        .write_file(
            "/var/lib/kubelet/kubeconfig-real",
            b"apiVersion: v1\nkind: Config\nclusters:\n- cluster: {server: https://old.example}\n  name: default-cluster\ncontexts:\n- context: {cluster: default-cluster, user: default-auth}\n  name: default-context\ncurrent-context: default-context\nusers:\n- name: default-auth\n  user: {client-certificate: /var/lib/kubelet/pki/kubelet-client-current.pem, client-key: /var/lib/kubelet/pki/kubelet-client-current.pem}\n",
            0o600,
        )
        .unwrap();
    new.machine
        .write_file(
            "/var/lib/kubelet/pki/kubelet-client-current.pem",
            b"PEM",
            0o600,
        )
        .unwrap();
    new.machine
        .write_file(
            "/etc/systemd/system/kubelet.service",
            b"[Service]\nExecStart=/bin/sleep infinity\n",
            0o644,
        )
        .unwrap();
    new.machine
        .run(&["systemctl", "daemon-reload"])
        .expect_success("daemon-reload");
    let v1 = put_osc(
        &new.shoot_client,
        &new.setup.secret_name,
        &in_place_osc("first", &[], None),
    )
    .await;
    let agent = start_and_join(
        &new.shoot_client,
        new.machine,
        &new.machine_name,
        &new.setup,
        &v1,
    )
    .await;
    let first = certificate_in(&agent.machine).unwrap();
    let invocation = agent.invocation(AGENT_UNIT);

    // gardenlet: the CA rotation starts; the new CA joins the bundle.
    let bundle = format!("{}{}", new.setup.ca_pem, another_ca());
    let v2 = put_osc(
        &new.shoot_client,
        &new.setup.secret_name,
        &in_place_osc(
            "second",
            &[b64_file(
                &format!("{CONFIG_DIR}/cluster-ca.crt"),
                bundle.as_bytes(),
                Some(0o644),
            )],
            Some("2026-01-01T00:00:00Z"),
        ),
    )
    .await;
    // Nothing before machine-controller-manager made the node ready.
    tokio::time::sleep(Duration::from_secs(4)).await;
    assert_eq!(certificate_in(&agent.machine).unwrap().serial, first.serial);

    let outcomes =
        mcm_in_place::roll(&new.shoot_client, std::slice::from_ref(&node), STEP_TIMEOUT).await;
    assert_eq!(
        outcomes[0].1,
        mcm_in_place::Outcome::Successful,
        "{}",
        agent.log()
    );
    wait_for_checksum(&new.shoot_client, &agent, &v2, STEP_TIMEOUT).await;
    let renewed = certificate_in(&agent.machine).unwrap();
    assert_ne!(renewed.serial, first.serial, "{}", agent.log());
    assert_eq!(
        agent.invocation(AGENT_UNIT),
        invocation,
        "no restart of the agent"
    );
    let log = agent.log();
    assert!(
        log.contains("the node agent has a new client certificate (no restart)"),
        "{log}"
    );
    assert!(
        log.contains("API client switched to the renewed credentials"),
        "{log}"
    );
    // The new certificate was asked for with the old one, by the agent's own user.
    let machine_user = format!("gardener.cloud:node-agent:machine:{}", new.machine_name);
    let csrs = Api::<CertificateSigningRequest>::all(new.shoot_client.clone())
        .list(&Default::default())
        .await
        .unwrap()
        .items;
    assert!(
        csrs.iter()
            .any(|csr| csr.spec.username.as_deref() == Some(machine_user.as_str())),
        "no request by {machine_user}"
    );
    // The kubeconfig still names the CA file, which now holds the bundle.
    let kubeconfig = String::from_utf8(agent.machine.read_file(KUBECONFIG).unwrap()).unwrap();
    assert!(
        kubeconfig.contains(&format!(
            "certificate-authority: {CONFIG_DIR}/cluster-ca.crt"
        )),
        "{kubeconfig}"
    );
    // kubelet was bootstrapped again.
    assert!(!exists(&agent.machine, "/var/lib/kubelet/kubeconfig-real"));
    assert!(!exists(&agent.machine, "/var/lib/kubelet/pki"));
    assert_eq!(
        agent
            .machine
            .unit_property("kubelet.service", "ActiveState"),
        "active"
    );
    drop(new.shoot);
}

/// The agent's API requests per idle minute with the certificate flow on (`make
/// bench-agent-certificate`, into docs/benchmarks.md): a machine bootstrapped as above, with
/// certificates of 30 days (so no renewal falls into the window), its OSC applied, then
/// [`IDLE_WINDOW`] without any change; the requests are those kube-apiserver's audit log shows
/// with the agent's `User-Agent`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "a measurement, not a check: make bench-agent-certificate"]
async fn idle_requests_with_the_certificate_flow() {
    const IDLE_WINDOW: Duration = Duration::from_secs(300);
    let env = support::env().await;
    let shoot = Shoot::start_for_node_agents(&env, Duration::from_secs(30 * 24 * 3600)).await;
    let audit = shoot.audit_log_path();
    let new = new_machine_in(&env, shoot).await;
    new.record.create().await;
    let agent = start_and_join(
        &new.shoot_client,
        new.machine,
        &new.machine_name,
        &new.setup,
        &new.checksum,
    )
    .await;
    // Settle: the report after the apply, the first health and unit checks.
    tokio::time::sleep(Duration::from_secs(70)).await;
    let is_agent = |user_agent: &str| user_agent.ends_with("(agent)");
    let mut log = support::audit::AuditLog::from_end(audit);
    tokio::time::sleep(IDLE_WINDOW).await;
    let idle = log.take(is_agent);
    let minutes = IDLE_WINDOW.as_secs_f64() / 60.0;
    let per_minute = support::audit::total(&idle) as f64 / minutes;
    let body = format!(
        "## Node agent: idle requests with the client-certificate flow\n\n\
         `make bench-agent-certificate` (`test/agent_certificate.rs`, `idle_requests_with_the_certificate_flow`): \
         an agent bootstrapped with a bootstrap token through the real CSR flow (kube-controller-manager's signer, \
         gardener-resource-manager's approver; certificates of 30 days), its OSC applied, then {window} s idle. \
         Requests are kube-apiserver's audit-log entries with the agent's `User-Agent` (exact, nothing subtracted).\n\n\
         | measure | value |\n|---|---|\n\
         | API requests per idle minute | {per_minute:.1} ({mix}, over {window} s) |\n\n",
        window = IDLE_WINDOW.as_secs(),
        mix = support::audit::describe(&idle),
    );
    println!("{body}");
    support::benchmarks::write_section("agent-certificate", &body);
    assert!(certificate_in(&agent.machine).is_some());
}

/// Where gardenlet's node-init puts the binary, and the node agent's unit runs it from.
const NODE_AGENT_BINARY: &str = "/opt/bin/gardener-node-agent";

/// What gardenlet's user data leaves in `config_dir` of `machine` before gardener-node-init
/// runs `bootstrap`: a configuration for `env`'s API server (with a metrics port of its own),
/// its CA, the bootstrap token file holding `token` and the machine name; gardener-node-init's
/// unit, enabled; the binary at [`NODE_AGENT_BINARY`].
fn before_bootstrap(
    machine: &support::nspawn::Machine,
    env: &support::TestEnv,
    config_dir: &str,
    token: &str,
) {
    let config = json!({
        "apiVersion": "nodeagent.config.gardener.cloud/v1alpha1",
        "kind": "NodeAgentConfiguration",
        "apiServer": {"server": env.server_url},
        "controllers": {"operatingSystemConfig": {
            "secretName": "gardener-node-agent-entry", "kubernetesVersion": KUBERNETES_VERSION,
        }},
        "server": {"metrics": {"port": free_port()}},
    });
    let init_unit = "[Unit]\nDescription=first boot\n[Service]\nType=oneshot\nExecStart=/bin/true\n[Install]\nWantedBy=multi-user.target\n";
    for (path, content, mode) in [
        (
            format!("{config_dir}/config-v1.149.3.yaml"),
            serde_norway::to_string(&config).unwrap(),
            0o600,
        ),
        (
            format!("{config_dir}/cluster-ca.crt"),
            env.ca_pem.clone(),
            0o644,
        ),
        (
            format!("{config_dir}/credentials/bootstrap-token"),
            token.to_string(),
            0o600,
        ),
        (
            format!("{config_dir}/machine-name"),
            "machine-entry\n".to_string(),
            0o644,
        ),
        (
            "/etc/systemd/system/gardener-node-init.service".to_string(),
            init_unit.to_string(),
            0o644,
        ),
    ] {
        machine.write_file(path, content.as_bytes(), mode).unwrap();
    }
    machine
        .sh(&format!("systemctl daemon-reload && systemctl enable gardener-node-init.service && install -D -m 0755 {BIN_IN_MACHINE} {NODE_AGENT_BINARY}"))
        .expect_success("node-init's part");
}

/// Waits until the node agent's journal in `machine` has `text`.
async fn wait_for_journal(machine: &support::nspawn::Machine, text: &str) -> String {
    let started = Instant::now();
    loop {
        let journal = machine.journal(AGENT_UNIT);
        if journal.contains(text) {
            return journal;
        }
        assert!(
            started.elapsed() < STEP_TIMEOUT,
            "{text:?} not in the node agent's journal within {STEP_TIMEOUT:?}:\n{journal}"
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

/// Issue #41 item 3: a bootstrap token file with a line break inside the token. `bootstrap`
/// (gardener-node-init) finishes with a warning that names the file and the problem — its
/// connectivity check fails, as GNA's does — instead of panicking (exit 101); the agent it
/// starts says the same in its log and keeps trying in-process (the file may be fixed), with
/// no panic and no restart, and writes no kubelet bootstrap kubeconfig with that token.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bootstrap_token_with_a_line_break_is_refused_without_a_crash_loop() {
    let env = support::env().await;
    let machine = boot(BIN);
    before_bootstrap(&machine, &env, CONFIG_DIR, "abcdef.01234\n56789abcdef\n");
    let bootstrap = machine.run(&[
        NODE_AGENT_BINARY,
        "bootstrap",
        &format!("--config-dir={CONFIG_DIR}"),
    ]);
    let output = format!("{}{}", bootstrap.stdout, bootstrap.stderr);
    println!("bootstrap: {}", bootstrap.status);
    assert!(
        bootstrap.success(),
        "bootstrap: {}\n{output}",
        bootstrap.status
    );
    let refused = format!(
        "{BOOTSTRAP_TOKEN} holds no usable bearer token: the token has a line break at byte 12 of 24"
    );
    assert!(
        output.contains("API server connectivity test failed") && output.contains(&refused),
        "{output}"
    );

    let journal = wait_for_journal(&machine, &refused).await;
    assert!(journal.contains("trying again"), "{journal}");
    // A few more rounds (5 s, 10 s): still the same process.
    tokio::time::sleep(Duration::from_secs(16)).await;
    let journal = machine.journal(AGENT_UNIT);
    assert!(!journal.contains("panicked"), "{journal}");
    assert_eq!(
        machine.unit_property(AGENT_UNIT, "NRestarts"),
        "0",
        "{journal}"
    );
    assert_eq!(machine.unit_property(AGENT_UNIT, "ActiveState"), "active");
    assert!(!exists(&machine, KUBELET_BOOTSTRAP), "{journal}");
    println!(
        "agent: {} refusals, no restart",
        journal.matches(&refused).count()
    );
}

/// Issue #41 item 8: `--config-dir` is a link (to a data disk, say) whose name has a space,
/// quotes, a backslash, `$` and `%`. `bootstrap` follows the link (as GNA does) and writes the
/// config dir into the unit's ExecStart quoted, so that systemd starts the agent with exactly
/// that argument; the agent works in the folder the link leads to.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bootstrap_follows_a_linked_config_dir_and_quotes_it_for_systemd() {
    let env = support::env().await;
    let machine = boot(BIN);
    let real = "/srv/data/gardener-node-agent";
    let given = "/var/lib/gna \"q\" \\b $HOME %n";
    before_bootstrap(&machine, &env, real, "abcdef.0123456789abcdef\n");
    machine
        .run(&["ln", "-s", real, given])
        .expect_success("the link");
    let bootstrap = machine.run(&[
        NODE_AGENT_BINARY,
        "bootstrap",
        &format!("--config-dir={given}"),
    ]);
    let output = format!("{}{}", bootstrap.stdout, bootstrap.stderr);
    println!("bootstrap: {}", bootstrap.status);
    assert!(
        bootstrap.success(),
        "bootstrap: {}\n{output}",
        bootstrap.status
    );

    let unit = String::from_utf8(
        machine
            .read_file("/etc/systemd/system/gardener-node-agent.service")
            .unwrap(),
    )
    .unwrap();
    assert!(
        unit.contains(
            "\nExecStart=/opt/bin/gardener-node-agent \"--config-dir=/var/lib/gna \\\"q\\\" \\\\b $$HOME %%n\"\n"
        ),
        "{unit}"
    );
    // systemd read it back as one argument, exactly the given folder.
    let journal = wait_for_journal(&machine, "starting the node agent").await;
    assert!(
        journal.contains(&format!("{real}/config-v1.149.3.yaml")),
        "{journal}"
    );
    let pid = machine.unit_property(AGENT_UNIT, "MainPID");
    let argv = machine
        .run(&["cat", &format!("/proc/{pid}/cmdline")])
        .expect_success("the agent's command line")
        .stdout;
    assert_eq!(
        argv.split('\0').collect::<Vec<_>>(),
        [NODE_AGENT_BINARY, &format!("--config-dir={given}"), ""],
        "{journal}"
    );
    assert!(exists(&machine, &format!("{real}/tmp")));
}
