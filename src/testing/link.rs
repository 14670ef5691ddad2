//! A TCP proxy on loopback between one client and the test server, which a test cuts and heals:
//! a partition of that client alone. It runs on a thread and runtime of its own, so it forwards
//! whatever the test's own runtime is doing (a test that blocks its runtime blocks no traffic).

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::watch;

use super::error::ServerError;
use crate::config::Config;

/// Where a link's traffic stands. A heal starts a new generation: connections of an older one
/// are closed, since a fault may have swallowed part of their traffic.
#[derive(Clone, Copy, Default)]
struct State {
    /// What clients send is dropped.
    requests_cut: bool,
    /// What the server sends back is dropped.
    replies_cut: bool,
    generation: u64,
    /// Nothing is read either way: what was sent waits in the sockets until a release.
    held: bool,
    /// Connections of a generation below this stay open and drop everything, for good.
    dead_below: u64,
    /// Pub/sub connections numbered below this stay open and drop everything, for good.
    pubsub_dead_below: u64,
    /// The link was dropped: everything ends.
    closed: bool,
}

impl State {
    /// Whether a connection born in generation `born` ends now (one whose flow was forgotten
    /// stays open, dropping everything).
    fn ends(&self, born: u64) -> bool {
        self.closed || (born >= self.dead_below && self.generation != born)
    }
}

/// A link between your client and a [`TestServer`](super::TestServer): a TCP proxy the kit
/// owns, with faults that only the clients going through it see. Closed (its connections with
/// it) when dropped. Made by [`TestServer::link`](super::TestServer::link).
#[derive(Debug)]
pub struct Link {
    addr: SocketAddr,
    tls: bool,
    state: watch::Sender<State>,
    /// The number the next connection accepted gets (from 1), in the order they came.
    next_connection: Arc<AtomicU64>,
    pub(super) config: Option<Config>,
}

impl std::fmt::Debug for State {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "requests {}, replies {}, generation {}{}",
            if self.requests_cut { "cut" } else { "pass" },
            if self.replies_cut { "cut" } else { "pass" },
            self.generation,
            if self.held { ", held" } else { "" }
        )
    }
}

impl Link {
    /// A link to any plain-TCP server at `target` (a replica, a node of your own; for a
    /// [`TestServer`](super::TestServer), [`TestServer::link`](super::TestServer::link) gives
    /// one whose [`config`](Self::config) has the kit's settings): it listens on a free loopback
    /// port and forwards each connection it accepts to `target`. Its `config` is
    /// `Config::new(self.url())`.
    pub fn start(target: SocketAddr) -> Result<Self, ServerError> {
        Ok(Self::open(target, false)?)
    }

    /// Listens on a free loopback port and forwards each connection to `target`.
    pub(super) fn open(target: SocketAddr, tls: bool) -> std::io::Result<Self> {
        let listener = std::net::TcpListener::bind("127.0.0.1:0")?;
        listener.set_nonblocking(true)?;
        let addr = listener.local_addr()?;
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?;
        let (state, rx) = watch::channel(State::default());
        let next_connection = Arc::new(AtomicU64::new(1));
        let numbers = Arc::clone(&next_connection);
        std::thread::Builder::new()
            .name(format!("lockman-test-link-{}", addr.port()))
            .spawn(move || {
                runtime.block_on(accept(listener, target, rx, numbers));
                // Dropping the runtime cancels every connection's task: their sockets close.
            })?;
        Ok(Self {
            addr,
            tls,
            state,
            next_connection,
            config: None,
        })
    }

    /// The link's address as a Redis URL: `redis://127.0.0.1:<port>/0` (with TLS,
    /// `rediss://localhost:<port>/0`: the bytes pass through, the certificate is the server's).
    pub fn url(&self) -> String {
        url_to(self.tls, self.addr.port())
    }

    /// A [`Config`] for a lock manager that reaches the server through this link, with the
    /// settings [`TestServer::config`](super::TestServer::config) describes.
    pub fn config(&self) -> Config {
        self.config
            .clone()
            .unwrap_or_else(|| Config::new(self.url()))
    }

    /// **This client cut off**, as by a network partition: from now on nothing passes either
    /// way, connections stay open (no reset reaches the client), and new ones are accepted but
    /// go nowhere. The server and other clients go on. The client's requests time out (its
    /// response timeout); its watchdog cannot renew, so each of its holds is reported lost
    /// (`lost()` resolves) before its
    /// `valid_until()`, while its key still lives in Redis
    /// until the lease runs out; then another client may take the lock. Its waits end in
    /// [`LockError::Unavailable`](crate::LockError::Unavailable).
    pub fn cut(&self) {
        self.state.send_modify(|s| {
            s.requests_cut = true;
            s.replies_cut = true;
        });
    }

    /// **Replies lost**: requests still reach the server and run there, but nothing comes back,
    /// as in an asymmetric partition: the client cannot tell whether what it sent ran. It sees
    /// what [`cut`](Self::cut) shows, except that what it sent did run in Redis: a
    /// `try_acquire` that fails with a time-out may have taken the lock.
    pub fn drop_replies(&self) {
        self.state.send_modify(|s| s.replies_cut = true);
    }

    /// Traffic flows again on new connections; the connections from before are closed, as a
    /// connection that timed out in a partition is. The client reconnects by itself.
    pub fn heal(&self) {
        self.state.send_modify(|s| {
            s.requests_cut = false;
            s.replies_cut = false;
            s.held = false;
            s.generation += 1;
        });
    }

    /// **Traffic held back**, nothing lost: from now on nothing passes either way (what is
    /// sent waits in the sockets), until [`release`](Self::release) lets it all through, late,
    /// as TCP retransmits after a short partition. The client sees what [`cut`](Self::cut)
    /// shows while it lasts; then a request it sent meanwhile reaches Redis after it may have
    /// given up on it (a late acquire that lockman must give back, a late release), and late
    /// replies arrive on connections it may have stopped waiting on.
    pub fn hold(&self) {
        self.state.send_modify(|s| s.held = true);
    }

    /// Ends a [`hold`](Self::hold): what was held back flows, on the same connections (none is
    /// closed, unlike [`heal`](Self::heal)).
    pub fn release(&self) {
        self.state.send_modify(|s| s.held = false);
    }

    /// **Old flows forgotten**: traffic passes again on new connections, but every connection
    /// from before stays open and drops everything, for good, with no reset: what a client sees
    /// when a NAT, a firewall or a load balancer forgot its flows during a partition. No error
    /// ever reaches the client on those connections; only its time-outs and new connections
    /// get it through (a later [`heal`](Self::heal) does not revive them).
    pub fn heal_new_only(&self) {
        self.state.send_modify(|s| {
            s.requests_cut = false;
            s.replies_cut = false;
            s.held = false;
            s.generation += 1;
            s.dead_below = s.generation;
        });
    }

    /// **Pub/sub flows forgotten**: the connections made so far that subscribed (sent a
    /// `SUBSCRIBE`, `SSUBSCRIBE` or `PSUBSCRIBE`) go silent for good, with no reset, while
    /// every command connection keeps working: what a NAT or a firewall does to an idle flow (a
    /// subscribed connection sends nothing while no message comes). The client hears no
    /// release from then on, until it notices and subscribes on a new connection; waits that
    /// rely on a message are woken by their own deadlines meanwhile.
    pub fn forget_pubsub(&self) {
        let next = self.next_connection.load(Ordering::SeqCst);
        self.state.send_modify(|s| s.pubsub_dead_below = next);
    }
}

impl Drop for Link {
    fn drop(&mut self) {
        self.state.send_modify(|s| s.closed = true);
    }
}

/// Accepts connections until the link is dropped.
async fn accept(
    listener: std::net::TcpListener,
    target: SocketAddr,
    mut rx: watch::Receiver<State>,
    numbers: Arc<AtomicU64>,
) {
    let Ok(listener) = tokio::net::TcpListener::from_std(listener) else {
        return;
    };
    loop {
        tokio::select! {
            accepted = listener.accept() => {
                if let Ok((inbound, _)) = accepted {
                    let id = numbers.fetch_add(1, Ordering::SeqCst);
                    tokio::spawn(serve(inbound, target, rx.clone(), id));
                }
            }
            changed = rx.changed() => {
                if changed.is_err() || rx.borrow().closed {
                    return;
                }
            }
        }
    }
}

/// One proxied connection: its generation, its number, and whether it subscribed.
struct Flow {
    born: u64,
    id: u64,
    pubsub: AtomicBool,
}

impl Flow {
    /// Whether it drops everything, for good (its flow was forgotten).
    fn dead(&self, state: &State) -> bool {
        self.born < state.dead_below
            || (self.pubsub.load(Ordering::SeqCst) && self.id < state.pubsub_dead_below)
    }
}

/// One proxied connection: joined to the server (its bytes dropped in a direction that is cut,
/// or left unread while held) until either side closes or a heal ends its generation.
async fn serve(inbound: TcpStream, target: SocketAddr, rx: watch::Receiver<State>, id: u64) {
    let flow = Flow {
        born: rx.borrow().generation,
        id,
        pubsub: AtomicBool::new(false),
    };
    let _ = inbound.set_nodelay(true);
    let Ok(outbound) = TcpStream::connect(target).await else {
        return;
    };
    let _ = outbound.set_nodelay(true);
    let (mut in_r, mut in_w) = inbound.into_split();
    let (mut out_r, mut out_w) = outbound.into_split();
    let up = pump(&mut in_r, &mut out_w, rx.clone(), &flow, true);
    let down = pump(&mut out_r, &mut in_w, rx, &flow, false);
    tokio::select! {
        _ = up => {}
        _ = down => {}
    }
}

/// Copies `from` to `to` (the client's requests when `requests`, else the server's replies),
/// dropping what it reads while this direction is cut or the flow is dead, reading nothing
/// while the link is held, until either side closes or the connection's generation ends. The
/// client's side marks the flow as pub/sub when it sends a SUBSCRIBE.
async fn pump<R, W>(
    from: &mut R,
    to: &mut W,
    mut rx: watch::Receiver<State>,
    flow: &Flow,
    requests: bool,
) where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin,
{
    let mut buf = vec![0u8; 16 * 1024];
    loop {
        let held = rx.borrow().held;
        tokio::select! {
            read = from.read(&mut buf), if !held => {
                let n = match read {
                    Ok(0) | Err(_) => return,
                    Ok(n) => n,
                };
                let mut state = *rx.borrow_and_update();
                // Read just as the link was held (the hold came while this read was under
                // way): the bytes wait with the rest until the release, as if never read.
                while state.held && !state.ends(flow.born) {
                    if rx.changed().await.is_err() {
                        return;
                    }
                    state = *rx.borrow_and_update();
                }
                if state.ends(flow.born) {
                    return;
                }
                if requests && subscribes(&buf[..n]) {
                    flow.pubsub.store(true, Ordering::SeqCst);
                }
                let cut = match requests {
                    true => state.requests_cut,
                    false => state.replies_cut,
                };
                if !cut && !flow.dead(&state) && to.write_all(&buf[..n]).await.is_err() {
                    return;
                }
            }
            changed = rx.changed() => {
                if changed.is_err() || rx.borrow().ends(flow.born) {
                    return;
                }
            }
        }
    }
}

/// Whether a client's bytes hold a (S|P)SUBSCRIBE command.
fn subscribes(bytes: &[u8]) -> bool {
    bytes
        .windows(9)
        .any(|w| w.eq_ignore_ascii_case(b"SUBSCRIBE"))
}

/// `redis://127.0.0.1:<port>/0`, or `rediss://localhost:<port>/0`.
pub(super) fn url_to(tls: bool, port: u16) -> String {
    match tls {
        true => format!("rediss://localhost:{port}/0"),
        false => format!("redis://127.0.0.1:{port}/0"),
    }
}
