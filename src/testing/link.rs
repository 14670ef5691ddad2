//! A TCP proxy on loopback between one client and the test server, which a test cuts and heals:
//! a partition of that client alone. It runs on a thread and runtime of its own, so it forwards
//! whatever the test's own runtime is doing (a test that blocks its runtime blocks no traffic).

use std::net::SocketAddr;

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
    /// The link was dropped: everything ends.
    closed: bool,
}

/// A link between your client and a [`TestServer`](super::TestServer): a TCP proxy the kit
/// owns, with faults that only the clients going through it see. Closed (its connections with
/// it) when dropped. Made by [`TestServer::link`](super::TestServer::link).
#[derive(Debug)]
pub struct Link {
    addr: SocketAddr,
    tls: bool,
    state: watch::Sender<State>,
    pub(super) config: Option<Config>,
}

impl std::fmt::Debug for State {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "requests {}, replies {}, generation {}",
            if self.requests_cut { "cut" } else { "pass" },
            if self.replies_cut { "cut" } else { "pass" },
            self.generation
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
        std::thread::Builder::new()
            .name(format!("lockman-test-link-{}", addr.port()))
            .spawn(move || {
                runtime.block_on(accept(listener, target, rx));
                // Dropping the runtime cancels every connection's task: their sockets close.
            })?;
        Ok(Self {
            addr,
            tls,
            state,
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
            s.generation += 1;
        });
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
) {
    let Ok(listener) = tokio::net::TcpListener::from_std(listener) else {
        return;
    };
    loop {
        tokio::select! {
            accepted = listener.accept() => {
                if let Ok((inbound, _)) = accepted {
                    tokio::spawn(serve(inbound, target, rx.clone()));
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

/// Whether a connection born in generation `born` ends now.
fn ends(state: &State, born: u64) -> bool {
    state.closed || state.generation != born
}

/// One proxied connection: joined to the server (its bytes dropped in a direction that is cut)
/// until either side closes or a heal ends its generation.
async fn serve(inbound: TcpStream, target: SocketAddr, rx: watch::Receiver<State>) {
    let born = rx.borrow().generation;
    let _ = inbound.set_nodelay(true);
    let Ok(outbound) = TcpStream::connect(target).await else {
        return;
    };
    let _ = outbound.set_nodelay(true);
    let (mut in_r, mut in_w) = inbound.into_split();
    let (mut out_r, mut out_w) = outbound.into_split();
    let up = pump(&mut in_r, &mut out_w, rx.clone(), born, |s| s.requests_cut);
    let down = pump(&mut out_r, &mut in_w, rx, born, |s| s.replies_cut);
    tokio::select! {
        _ = up => {}
        _ = down => {}
    }
}

/// Copies `from` to `to`, dropping what it reads while this direction is cut, until either side
/// closes or the connection's generation ends.
async fn pump<R, W>(
    from: &mut R,
    to: &mut W,
    mut rx: watch::Receiver<State>,
    born: u64,
    cut: fn(&State) -> bool,
) where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin,
{
    let mut buf = vec![0u8; 16 * 1024];
    loop {
        tokio::select! {
            read = from.read(&mut buf) => {
                let n = match read {
                    Ok(0) | Err(_) => return,
                    Ok(n) => n,
                };
                let state = *rx.borrow();
                if ends(&state, born) {
                    return;
                }
                if !cut(&state) && to.write_all(&buf[..n]).await.is_err() {
                    return;
                }
            }
            changed = rx.changed() => {
                if changed.is_err() || ends(&rx.borrow(), born) {
                    return;
                }
            }
        }
    }
}

/// `redis://127.0.0.1:<port>/0`, or `rediss://localhost:<port>/0`.
pub(super) fn url_to(tls: bool, port: u16) -> String {
    match tls {
        true => format!("rediss://localhost:{port}/0"),
        false => format!("redis://127.0.0.1:{port}/0"),
    }
}
