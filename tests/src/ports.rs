//! Ports for the processes the tests start (gateways, nginx, relays), chosen below the
//! kernel's ephemeral range. A port the OS hands out for a bind to port 0 comes from that
//! range, which is also where every outgoing connection takes its local port: between the
//! check and the process's own bind, a client connection of another test could take it
//! (seen in a run: a cluster node exited with "Address already in use"). Below the range
//! only another explicit bind can take it, and this process hands each port out once, in
//! turn from a random start (cargo runs the test binaries one after another).

use std::net::TcpListener;
use std::sync::Mutex;

use rand::RngExt;

/// The lowest port handed out: above the well-known ports and the usual services'.
const LOW: u16 = 20_000;

/// The port after the last one handed out by this process.
static NEXT: Mutex<Option<u16>> = Mutex::new(None);

/// The first port of the kernel's ephemeral range (Linux's default when unreadable).
fn ephemeral_start() -> u16 {
    std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|s| s.split_whitespace().next()?.parse().ok())
        .unwrap_or(32_768)
}

/// `n` distinct ports free right now on 127.0.0.1, none handed out before by this process
/// (until the span wraps), all held while choosing, then released.
pub fn free_ports(n: usize) -> Vec<u16> {
    let high = ephemeral_start();
    let held: Vec<TcpListener> = if high < LOW + 1_000 {
        // A range moved down to where this would choose from: the OS's choice.
        (0..n)
            .map(|_| TcpListener::bind("127.0.0.1:0").expect("bind 127.0.0.1:0"))
            .collect()
    } else {
        let mut next = NEXT.lock().unwrap_or_else(|p| p.into_inner());
        let mut port = next.unwrap_or_else(|| rand::rng().random_range(LOW..high));
        let mut held = Vec::with_capacity(n);
        for _ in LOW..high {
            if held.len() == n {
                break;
            }
            if let Ok(l) = TcpListener::bind(("127.0.0.1", port)) {
                held.push(l);
            }
            port = if port + 1 >= high { LOW } else { port + 1 };
        }
        *next = Some(port);
        held
    };
    assert_eq!(held.len(), n, "fewer than {n} free ports on 127.0.0.1");
    held.iter()
        .map(|l| l.local_addr().expect("local addr").port())
        .collect()
}

/// One port as [`free_ports`] gives them.
pub fn free_port() -> u16 {
    free_ports(1)[0]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ports_are_distinct_and_below_the_ephemeral_range() {
        let mut all = free_ports(5);
        all.extend(free_ports(5));
        all.push(free_port());
        let high = ephemeral_start();
        if high >= LOW + 1_000 {
            assert!(all.iter().all(|p| (LOW..high).contains(p)), "{all:?}");
        }
        let n = all.len();
        all.sort_unstable();
        all.dedup();
        assert_eq!(all.len(), n, "a port handed out twice");
    }
}
