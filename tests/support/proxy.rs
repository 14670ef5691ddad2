//! A TCP proxy on loopback between a client and a throwaway redis-server, which a test can
//! cut: every connection through it closed at once and new ones refused, as a network
//! partition of that client alone. It runs on a thread and runtime of its own, so it forwards
//! whatever the test's own runtime is doing.

use std::net::SocketAddr;
use std::sync::mpsc;

use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tokio::task::JoinSet;

/// A running proxy; cut (and its thread ended) when dropped.
pub struct Proxy {
    addr: SocketAddr,
    cut: watch::Sender<bool>,
    done: Option<mpsc::Receiver<()>>,
}

impl Proxy {
    /// Listens on a free loopback port and forwards each connection to `target`.
    pub fn start(target: SocketAddr) -> Self {
        let (cut, mut cut_rx) = watch::channel(false);
        let (ready_tx, ready_rx) = mpsc::channel();
        let (done_tx, done_rx) = mpsc::channel();
        std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("the proxy's runtime");
            runtime.block_on(async move {
                let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
                let _ = ready_tx.send(listener.local_addr().expect("its address"));
                let mut pipes = JoinSet::new();
                loop {
                    tokio::select! {
                        accepted = listener.accept() => {
                            let Ok((client, _)) = accepted else { continue };
                            pipes.spawn(pipe(client, target));
                        }
                        _ = cut_rx.changed() => break,
                    }
                    // Reap the pipes that ended by themselves.
                    while pipes.try_join_next().is_some() {}
                }
                // Refuse new connections (the listener closes), then close every open one:
                // aborting a pipe drops both of its sockets.
                drop(listener);
                pipes.shutdown().await;
            });
            let _ = done_tx.send(());
        });
        let addr = ready_rx.recv().expect("the proxy listens");
        Self {
            addr,
            cut,
            done: Some(done_rx),
        }
    }

    /// `redis://127.0.0.1:PORT`: the proxy's address as a Redis URL.
    pub fn url(&self) -> String {
        format!("redis://{}", self.addr)
    }

    /// Closes every connection through the proxy and refuses new ones; returns once done.
    pub fn cut(&mut self) {
        let _ = self.cut.send(true);
        if let Some(done) = self.done.take() {
            let _ = done.recv();
        }
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.cut();
    }
}

/// Copies both ways between `client` and a new connection to `target` until either closes.
async fn pipe(mut client: TcpStream, target: SocketAddr) {
    let Ok(mut server) = TcpStream::connect(target).await else {
        return;
    };
    let _ = tokio::io::copy_bidirectional(&mut client, &mut server).await;
}
