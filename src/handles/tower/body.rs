//! What a request holds while it runs: its guard, lent to the inner service in the request's
//! extensions ([`LockHeld`], [`PermitHeld`]), and the response body ([`Guarded`]) that keeps it
//! until the body's last frame is read or the body is dropped.

use std::fmt;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use bytes::Bytes;
use http::Request;
use http_body::{Body, Frame, SizeHint};

use crate::handles::lock::LockGuard;
use crate::handles::sync::PermitGuard;

/// The guard a request holds, kept for its drop: dropping the last of its handles (this one and
/// the request extension's) releases the lock or the permit.
#[derive(Debug)]
pub(super) enum Held {
    Lock(Arc<LockGuard>),
    Permit(Arc<PermitGuard>),
}

impl Held {
    /// Hands the inner service a handle on the guard, in the request's extensions.
    pub(super) fn lend<B>(&self, req: &mut Request<B>) {
        let extensions = req.extensions_mut();
        match self {
            Self::Lock(guard) => {
                extensions.insert(LockHeld(guard.clone()));
            }
            Self::Permit(guard) => {
                extensions.insert(PermitHeld(guard.clone()));
            }
        }
    }
}

/// The lock of this request, in its extensions for the inner service (axum:
/// `Extension<LockHeld>`): it dereferences to its [`LockGuard`] (name, lost signal, deadline,
/// [`scope`](LockGuard::scope)). The lock is released once the response's body is sent **and**
/// every `LockHeld` is dropped: a handler that keeps one (a spawned task) keeps the lock.
#[derive(Clone, Debug)]
pub struct LockHeld(pub(super) Arc<LockGuard>);

impl std::ops::Deref for LockHeld {
    type Target = LockGuard;

    fn deref(&self) -> &LockGuard {
        &self.0
    }
}

/// The permit of this request, in its extensions for the inner service (axum:
/// `Extension<PermitHeld>`): it dereferences to its [`PermitGuard`] (lost signal, ids,
/// deadline). As with [`LockHeld`], the permit is given back once the body is sent and every
/// `PermitHeld` is dropped.
#[derive(Clone, Debug)]
pub struct PermitHeld(pub(super) Arc<PermitGuard>);

impl std::ops::Deref for PermitHeld {
    type Target = PermitGuard;

    fn deref(&self) -> &PermitGuard {
        &self.0
    }
}

pin_project_lite::pin_project! {
    /// The body of an [`Admit`](super::Admit) service's response: the inner service's body, with
    /// the request's lock or permit held until its last frame is read or it is dropped; or the text
    /// of a refusal.
    pub struct Guarded<B> {
        #[pin]
        inner: Option<B>,
        refusal: Option<Bytes>,
        held: Option<Held>,
    }
}

impl<B> Guarded<B> {
    pub(super) fn holding(body: B, held: Held) -> Self {
        Self {
            inner: Some(body),
            refusal: None,
            held: Some(held),
        }
    }

    pub(super) fn refusal(text: String) -> Self {
        Self {
            inner: None,
            refusal: Some(Bytes::from(text)),
            held: None,
        }
    }

    /// A refusal's text, until it is read.
    #[cfg(test)]
    pub(super) fn refusal_text(&self) -> Option<&[u8]> {
        self.refusal.as_deref()
    }

    /// Whether the request's lock or permit is still held by this body (until its end is read).
    pub fn holds(&self) -> bool {
        self.held.is_some()
    }
}

impl<B> fmt::Debug for Guarded<B> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Guarded")
            .field("refusal", &self.refusal)
            .field("holds", &self.held.is_some())
            .finish_non_exhaustive()
    }
}

impl<B> Body for Guarded<B>
where
    B: Body<Data = Bytes>,
{
    type Data = Bytes;
    type Error = B::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, B::Error>>> {
        let this = self.project();
        match this.inner.as_pin_mut() {
            Some(inner) => {
                let frame = std::task::ready!(inner.poll_frame(cx));
                if frame.is_none() {
                    // The whole body is out: the request is done, give its lock back.
                    *this.held = None;
                }
                Poll::Ready(frame)
            }
            None => Poll::Ready(this.refusal.take().map(|text| Ok(Frame::data(text)))),
        }
    }

    fn is_end_stream(&self) -> bool {
        match &self.inner {
            Some(inner) => inner.is_end_stream(),
            None => self.refusal.is_none(),
        }
    }

    fn size_hint(&self) -> SizeHint {
        match (&self.inner, &self.refusal) {
            (Some(inner), _) => inner.size_hint(),
            (None, Some(text)) => SizeHint::with_exact(text.len() as u64),
            (None, None) => SizeHint::with_exact(0),
        }
    }
}
