//! A TCP proxy between one worker and the lock server (one server's deployment), so that one
//! worker can be cut off while the others go on: every worker's connections go through a
//! proxy of its own. Threads, no runtime: the runner is synchronous.
//!
//! - `cut`: nothing flows either way, on open connections and new ones, until it heals; then
//!   what was held back flows (as TCP retransmits after a short partition): a request sent
//!   during the cut reaches Redis late, after its caller may have given up on it.
//! - `drop-replies`: requests reach Redis, replies are thrown away; when it heals every
//!   connection opened before is closed (its stream lost bytes), as TCP gives up on it.

use std::io::{ErrorKind, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::Arc;
use std::sync::atomic::{AtomicU8, AtomicU64, Ordering};
use std::time::Duration;

const PASS: u8 = 0;
const CUT: u8 = 1;
const DROP_REPLIES: u8 = 2;

/// One worker's proxy; its threads run until the runner exits.
pub struct Proxy {
    port: u16,
    mode: Arc<AtomicU8>,
    /// Connections opened before a bump are closed by their pumps.
    generation: Arc<AtomicU64>,
}

impl Proxy {
    /// Listens on a free loopback port and forwards to `upstream`.
    pub fn start(upstream: SocketAddr) -> std::io::Result<Self> {
        let listener = TcpListener::bind("127.0.0.1:0")?;
        let port = listener.local_addr()?.port();
        let mode = Arc::new(AtomicU8::new(PASS));
        let generation = Arc::new(AtomicU64::new(0));
        let (m, g) = (mode.clone(), generation.clone());
        std::thread::spawn(move || {
            for client in listener.incoming() {
                let Ok(client) = client else { continue };
                let Ok(server) = TcpStream::connect(upstream) else {
                    continue;
                };
                let now = g.load(Ordering::SeqCst);
                for (from, to, replies) in [(&client, &server, false), (&server, &client, true)] {
                    let (Ok(from), Ok(to)) = (from.try_clone(), to.try_clone()) else {
                        continue;
                    };
                    let (m, g) = (m.clone(), g.clone());
                    std::thread::spawn(move || pump(from, to, replies, m, now, g));
                }
            }
        });
        Ok(Self {
            port,
            mode,
            generation,
        })
    }

    /// The worker's target: the lock server's URL with the proxy's port.
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/0", self.port)
    }

    /// Nothing flows until [`Proxy::heal`].
    pub fn cut(&self) {
        self.mode.store(CUT, Ordering::SeqCst);
    }

    /// Requests flow, replies are dropped, until [`Proxy::heal`].
    pub fn drop_replies(&self) {
        self.mode.store(DROP_REPLIES, Ordering::SeqCst);
    }

    /// Everything flows again; after dropped replies, the connections that lost them close.
    pub fn heal(&self) {
        if self.mode.swap(PASS, Ordering::SeqCst) == DROP_REPLIES {
            self.generation.fetch_add(1, Ordering::SeqCst);
        }
    }
}

fn pump(
    mut from: TcpStream,
    mut to: TcpStream,
    replies: bool,
    mode: Arc<AtomicU8>,
    born: u64,
    generation: Arc<AtomicU64>,
) {
    let _ = from.set_read_timeout(Some(Duration::from_millis(20)));
    let mut buf = vec![0u8; 64 * 1024];
    while generation.load(Ordering::SeqCst) == born {
        let now = mode.load(Ordering::SeqCst);
        if now == CUT {
            std::thread::sleep(Duration::from_millis(5));
            continue;
        }
        match from.read(&mut buf) {
            Ok(0) => break,
            Ok(_) if replies && now == DROP_REPLIES => {}
            Ok(n) => {
                if to.write_all(&buf[..n]).is_err() {
                    break;
                }
            }
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {}
            Err(_) => break,
        }
    }
    let _ = from.shutdown(Shutdown::Both);
    let _ = to.shutdown(Shutdown::Both);
}
