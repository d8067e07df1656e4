//! Network namespaces for partition tests: one namespace per node, all joined by one bridge,
//! and `iptables` rules inside a node's namespace to cut it off from its peers.
//!
//! ```text
//!   root namespace (the test process, its client threads)
//!     bridge <br> 10.A.B.254/24 ──┬── veth <host1> ══ eth0 10.A.B.1/24 in namespace <ns1>
//!                                 ├── veth <host2> ══ eth0 10.A.B.2/24 in namespace <ns2>
//!                                 └── veth <host3> ══ eth0 10.A.B.3/24 in namespace <ns3>
//! ```
//!
//! Node `i` (numbered from 1, as the cluster numbers them) has the address `10.A.B.i` in its
//! own namespace (loopback up too), where a gateway is started with `ip netns exec` (see
//! [`NetLab::placements`] and [`crate::cluster::Cluster::start_in`]). The test process, in
//! the root namespace, reaches every node through the bridge, which holds `10.A.B.254`.
//! The subnet `10.A.B.0/24` (A in 100..=250) and every name (namespaces `e2e-<tag>-n<i>`,
//! bridge `e2ebr<tag>`, host-side veths `e2eh<tag>n<i>`) are chosen at random per lab, so
//! concurrent runs do not collide; a subnet some route or address already uses is skipped.
//!
//! Partitions are `iptables` DROP rules in the INPUT chain of the nodes' namespaces (each
//! end of a cut link drops what comes from the other), so they cut node-to-node traffic
//! only: the test process (10.A.B.254) keeps reaching every node, and a client talking to a
//! cut-off node sees what a real client would. DROP, not REJECT (which answers at once),
//! on the receiving side: packets leave the sender and vanish, as across a real partition,
//! new connections time out and open ones stall. [`NetLab::heal`] flushes every rule.
//!
//! Traffic between two namespaces is bridged in the root namespace; with `br_netfilter`
//! loaded (`net.bridge.bridge-nf-call-iptables = 1`) it also goes through the root
//! namespace's FORWARD chain, whose policy may be DROP (e.g. with Docker). The lab inserts an
//! ACCEPT rule for its bridge at the head of the root namespace's FORWARD and INPUT chains,
//! so only the rules inside the nodes' namespaces decide; both are removed on drop.
//!
//! Everything (rules, veths, namespaces, bridge) is removed when the [`NetLab`] is dropped,
//! also when the test panics; kill the processes running inside the namespaces first (drop
//! the cluster before the lab). Needs root, `ip` (iproute2) and `iptables`: without them
//! [`NetLab::new`] panics saying so (never a silent skip). Every command is bounded by
//! [`COMMAND_TIMEOUT`]; a failing command panics with its command line and its output.

use std::fs::File;
use std::io::{self, Read};
use std::net::{IpAddr, Ipv4Addr, SocketAddr, TcpListener, TcpStream};
use std::os::fd::AsRawFd;
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::thread;
use std::time::{Duration, Instant};

use rand::RngExt;

use crate::Placement;

/// Bound on one `ip` or `iptables` command.
pub const COMMAND_TIMEOUT: Duration = Duration::from_secs(30);
/// How long `iptables` waits for the xtables lock (`-w`), in seconds.
const XTABLES_WAIT_SECS: &str = "10";

/// One node's namespace.
#[derive(Debug, Clone)]
struct Node {
    /// The namespace's name (`ip netns`).
    ns: String,
    /// The host-side end of its veth pair, on the bridge (deleting it deletes the pair).
    host_if: String,
    addr: Ipv4Addr,
}

/// A bridge and one network namespace per node; see the module documentation.
pub struct NetLab {
    tag: String,
    bridge: String,
    /// The first three octets of the lab's /24.
    subnet: [u8; 3],
    /// The nodes created so far (all of them once [`NetLab::new`] returns).
    nodes: Vec<Node>,
    bridge_created: bool,
    /// Rules inserted in the root namespace (chain and match), removed on drop.
    root_rules: Vec<Vec<String>>,
}

impl NetLab {
    /// Creates the bridge and `n` namespaces (nodes 1..=n); panics with a clear message if
    /// the test is not root or `ip`/`iptables` are missing, or if any command fails (what
    /// was created so far is removed).
    pub fn new(n: usize) -> NetLab {
        assert!((1..=100).contains(&n), "a lab has 1 to 100 nodes, not {n}");
        require_tools();
        let mut rng = rand::rng();
        let tag: String = (0..6)
            .map(|_| char::from_digit(rng.random_range(0..16u32), 16).expect("hex digit"))
            .collect();
        let subnet = free_subnet();
        let mut lab = NetLab {
            bridge: format!("e2ebr{tag}"),
            tag,
            subnet,
            nodes: Vec::new(),
            bridge_created: false,
            root_rules: Vec::new(),
        };
        // A panic below drops `lab`, which removes what exists.
        let br = lab.bridge.clone();
        run(&["ip", "link", "add", &br, "type", "bridge"]);
        lab.bridge_created = true;
        let cidr = format!("{}/24", lab.host_addr());
        run(&["ip", "addr", "add", &cidr, "dev", &br]);
        run(&["ip", "link", "set", &br, "up"]);
        let comment = format!("e2e-netns-{}", lab.tag);
        for chain in ["FORWARD", "INPUT"] {
            let mut rule: Vec<String> = vec![chain.into(), "-i".into(), br.clone()];
            if chain == "FORWARD" {
                rule.extend(["-o".into(), br.clone()]);
            }
            rule.extend(
                ["-m", "comment", "--comment", &comment, "-j", "ACCEPT"]
                    .iter()
                    .map(|s| s.to_string()),
            );
            let mut args = vec!["iptables", "-w", XTABLES_WAIT_SECS, "-I"];
            args.extend(rule.iter().map(String::as_str));
            run(&args);
            lab.root_rules.push(rule);
        }
        for id in 1..=n {
            let node = Node {
                ns: format!("e2e-{}-n{id}", lab.tag),
                host_if: format!("e2eh{}n{id}", lab.tag),
                addr: lab.addr_of(id),
            };
            run(&["ip", "netns", "add", &node.ns]);
            lab.nodes.push(node.clone());
            // The pair is created with its inner end already in the namespace, named eth0.
            run(&[
                "ip",
                "link",
                "add",
                &node.host_if,
                "type",
                "veth",
                "peer",
                "name",
                "eth0",
                "netns",
                &node.ns,
            ]);
            run(&["ip", "link", "set", &node.host_if, "master", &br]);
            run(&["ip", "link", "set", &node.host_if, "up"]);
            let cidr = format!("{}/24", node.addr);
            run(&["ip", "-n", &node.ns, "addr", "add", &cidr, "dev", "eth0"]);
            run(&["ip", "-n", &node.ns, "link", "set", "eth0", "up"]);
            run(&["ip", "-n", &node.ns, "link", "set", "lo", "up"]);
            // Fail now, not in the middle of a test, if iptables cannot work in there.
            lab.iptables(id, &["-S"]);
        }
        lab
    }

    /// How many nodes.
    pub fn size(&self) -> usize {
        self.nodes.len()
    }

    /// The random tag in every name of this lab.
    pub fn tag(&self) -> &str {
        &self.tag
    }

    /// Node `id`'s namespace name.
    pub fn ns(&self, id: usize) -> &str {
        &self.node(id).ns
    }

    /// Node `id`'s address (`10.A.B.id`).
    pub fn addr(&self, id: usize) -> Ipv4Addr {
        self.node(id).addr
    }

    /// The root namespace's address on the bridge (`10.A.B.254`): the test's source address.
    pub fn host_addr(&self) -> Ipv4Addr {
        Ipv4Addr::new(self.subnet[0], self.subnet[1], self.subnet[2], 254)
    }

    /// `10.A.B.0/24`.
    pub fn subnet(&self) -> String {
        format!(
            "{}.{}.{}.0/24",
            self.subnet[0], self.subnet[1], self.subnet[2]
        )
    }

    /// Where node `i + 1` runs: its address, in its namespace (for
    /// [`crate::cluster::Cluster::start_in`]).
    pub fn placements(&self) -> Vec<Placement> {
        self.nodes
            .iter()
            .map(|n| Placement {
                host: IpAddr::V4(n.addr),
                netns: Some(n.ns.clone()),
            })
            .collect()
    }

    /// Cuts the link between nodes `a` and `b` in both directions: each one's INPUT chain
    /// drops what comes from the other. Packets leave and vanish (a sender sees timeouts,
    /// not refusals, as across a real partition); their links to other nodes and to the
    /// test process stay up.
    pub fn cut(&self, a: usize, b: usize) {
        assert_ne!(a, b, "cut: a node has no link to itself");
        for (here, there) in [(a, b), (b, a)] {
            let peer = self.addr(there).to_string();
            self.iptables(here, &["-A", "INPUT", "-s", &peer, "-j", "DROP"]);
        }
    }

    /// Cuts node `a` off from every other node (the test process still reaches it).
    pub fn isolate(&self, a: usize) {
        for b in 1..=self.size() {
            if b != a {
                self.cut(a, b);
            }
        }
    }

    /// Removes every partition: flushes the filter table of every node's namespace.
    pub fn heal(&self) {
        for id in 1..=self.size() {
            self.iptables(id, &["-F"]);
        }
    }

    /// Node `id`'s filter rules (`iptables -S`), for failure messages.
    pub fn rules(&self, id: usize) -> String {
        self.iptables(id, &["-S"])
    }

    /// Every node's DROP rules, one line each (`-` for none), for failure messages.
    pub fn describe(&self) -> String {
        (1..=self.size())
            .map(|id| {
                let drops: Vec<String> = self
                    .rules(id)
                    .lines()
                    .filter(|l| l.contains("DROP") && l.starts_with("-A"))
                    .map(str::to_string)
                    .collect();
                let drops = if drops.is_empty() {
                    "-".to_string()
                } else {
                    drops.join("; ")
                };
                format!("node {id} ({}, {}): {drops}\n", self.ns(id), self.addr(id))
            })
            .collect()
    }

    /// Runs `iptables -w ARGS` inside node `id`'s namespace; returns its stdout, panics if it
    /// fails.
    pub fn iptables(&self, id: usize, args: &[&str]) -> String {
        let mut all = vec![
            "ip",
            "netns",
            "exec",
            self.ns(id),
            "iptables",
            "-w",
            XTABLES_WAIT_SECS,
        ];
        all.extend_from_slice(args);
        run(&all)
    }

    /// A TCP connection to `to` made from inside node `from`'s namespace (`None`: from the
    /// root namespace), connect bounded by `timeout`: whether traffic passes.
    pub fn connect_from(
        &self,
        from: Option<usize>,
        to: SocketAddr,
        timeout: Duration,
    ) -> io::Result<TcpStream> {
        let ns = from.map(|id| self.ns(id).to_string());
        in_namespace(ns.as_deref(), move || {
            TcpStream::connect_timeout(&to, timeout)
        })?
    }

    /// A listener on `addr` created inside node `id`'s namespace (the socket stays there
    /// whichever thread uses it).
    pub fn listen_in(&self, id: usize, addr: SocketAddr) -> io::Result<TcpListener> {
        in_namespace(Some(self.ns(id)), move || TcpListener::bind(addr))?
    }

    fn node(&self, id: usize) -> &Node {
        assert!(
            (1..=self.nodes.len()).contains(&id),
            "no node {id} in a lab of {}",
            self.nodes.len()
        );
        &self.nodes[id - 1]
    }

    fn addr_of(&self, id: usize) -> Ipv4Addr {
        let last = u8::try_from(id).expect("node id fits the last octet");
        Ipv4Addr::new(self.subnet[0], self.subnet[1], self.subnet[2], last)
    }
}

impl Drop for NetLab {
    /// Removes every veth pair, namespace, the bridge and the root rules; a failure is
    /// printed (a drop does not panic), the rest is still removed.
    fn drop(&mut self) {
        let mut failures = Vec::new();
        let mut attempt = |args: &[&str]| {
            if let Err(e) = try_run(args) {
                failures.push(e);
            }
        };
        for node in &self.nodes {
            // Deleting the host end deletes the pair, even if a leftover process keeps the
            // namespace alive.
            attempt(&["ip", "link", "del", &node.host_if]);
            attempt(&["ip", "netns", "del", &node.ns]);
        }
        if self.bridge_created {
            attempt(&["ip", "link", "del", &self.bridge]);
        }
        for rule in &self.root_rules {
            let mut args = vec!["iptables", "-w", XTABLES_WAIT_SECS, "-D"];
            args.extend(rule.iter().map(String::as_str));
            attempt(&args);
        }
        if !failures.is_empty() {
            eprintln!(
                "netns lab {}: cleanup failures (remove by hand):\n{}",
                self.tag,
                failures.join("\n")
            );
        }
    }
}

/// Panics with what to install (or how to run) unless this is root with `ip` and
/// `iptables`.
pub fn require_tools() {
    // SAFETY: geteuid(2) has no preconditions and cannot fail.
    let euid = unsafe { libc::geteuid() };
    assert_eq!(
        euid, 0,
        "network namespace tests need root (ip netns, veth, bridge, iptables); euid is {euid}"
    );
    for (tool, package) in [("ip", "iproute2"), ("iptables", "iptables")] {
        if let Err(e) = try_run(&[tool, "-V"]) {
            panic!("network namespace tests need `{tool}`: apt-get install -y {package} ({e})");
        }
    }
}

/// A /24 in 10.100.0.0-10.250.255.0 that no address or route of the root namespace uses.
fn free_subnet() -> [u8; 3] {
    let mut rng = rand::rng();
    let used = format!(
        "{}\n{}",
        run(&["ip", "-4", "addr", "show"]),
        run(&["ip", "-4", "route", "show", "table", "all"])
    );
    for _ in 0..200 {
        let s = [
            10,
            rng.random_range(100..=250u8),
            rng.random_range(0..=255u8),
        ];
        let prefix = format!("{}.{}.{}.", s[0], s[1], s[2]);
        if !used.contains(&prefix) {
            return s;
        }
    }
    panic!("no free 10.x.y.0/24 subnet after 200 tries; in use:\n{used}")
}

/// Runs `f` on a new thread that has entered namespace `ns` (`None`: this one); sockets it
/// creates belong to that namespace.
fn in_namespace<T: Send + 'static>(
    ns: Option<&str>,
    f: impl FnOnce() -> T + Send + 'static,
) -> io::Result<T> {
    let ns = ns.map(|n| format!("/run/netns/{n}"));
    thread::spawn(move || -> io::Result<T> {
        if let Some(path) = ns {
            let file = File::open(&path)
                .map_err(|e| io::Error::new(e.kind(), format!("open {path}: {e}")))?;
            // SAFETY: setns(2) on an open namespace file; it changes this thread only.
            let rc = unsafe { libc::setns(file.as_raw_fd(), libc::CLONE_NEWNET) };
            if rc != 0 {
                let e = io::Error::last_os_error();
                return Err(io::Error::new(e.kind(), format!("setns {path}: {e}")));
            }
        }
        Ok(f())
    })
    .join()
    .unwrap_or_else(|_| Err(io::Error::other("the namespace thread panicked")))
}

/// Runs a command (bounded by [`COMMAND_TIMEOUT`]) and returns its stdout; panics with the
/// command line, exit status and output if it fails.
pub fn run(args: &[&str]) -> String {
    try_run(args).unwrap_or_else(|e| panic!("{e}"))
}

/// Runs a command (bounded by [`COMMAND_TIMEOUT`]): its stdout, or why it failed.
pub fn try_run(args: &[&str]) -> Result<String, String> {
    let line = args.join(" ");
    let mut child = Command::new(args[0])
        .args(&args[1..])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| format!("`{line}` did not start: {e}"))?;
    let read = |mut pipe: Box<dyn Read + Send>| {
        let (tx, rx) = mpsc::channel();
        thread::spawn(move || {
            let mut buf = Vec::new();
            let _ = pipe.read_to_end(&mut buf);
            let _ = tx.send(String::from_utf8_lossy(&buf).into_owned());
        });
        rx
    };
    let stdout = read(Box::new(child.stdout.take().expect("piped stdout")));
    let stderr = read(Box::new(child.stderr.take().expect("piped stderr")));
    let deadline = Instant::now() + COMMAND_TIMEOUT;
    let status = loop {
        match child.try_wait() {
            Ok(Some(status)) => break status,
            Ok(None) if Instant::now() < deadline => thread::sleep(Duration::from_millis(5)),
            Ok(None) => {
                let _ = child.kill();
                let _ = child.wait();
                return Err(format!(
                    "`{line}` took more than {COMMAND_TIMEOUT:?}; killed"
                ));
            }
            Err(e) => return Err(format!("`{line}`: wait failed: {e}")),
        }
    };
    let out = stdout.recv_timeout(COMMAND_TIMEOUT).unwrap_or_default();
    let err = stderr.recv_timeout(COMMAND_TIMEOUT).unwrap_or_default();
    if status.success() {
        Ok(out)
    } else {
        Err(format!(
            "`{line}` failed ({status}):\n{}{}",
            out.trim_end(),
            err.trim_end()
        ))
    }
}
