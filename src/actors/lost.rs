//! [`LostSignal`]: what a grant of a lock or of permits carries to say that its hold is gone —
//! the one thing the handles share with the actors besides messages.

use tokio::sync::watch;

/// The receiving side of a hold's lost signal. Its actor sets it when the hold is found gone
/// (renewal, a lease's end, a release); an actor that stopped counts as a loss too.
#[derive(Clone, Debug)]
pub(crate) struct LostSignal(watch::Receiver<bool>);

impl LostSignal {
    pub(crate) fn new(rx: watch::Receiver<bool>) -> Self {
        Self(rx)
    }

    /// Whether the hold is known to be lost (or its actor stopped).
    pub(crate) fn is_lost(&self) -> bool {
        *self.0.borrow() || self.0.has_changed().is_err()
    }

    /// Resolves once the hold is known to be lost; never, while it is held.
    pub(crate) async fn wait(&self) {
        let mut lost = self.0.clone();
        let _ = lost.wait_for(|lost| *lost).await;
    }
}
