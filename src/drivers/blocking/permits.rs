//! Semaphores on the blocking client: a permit is a lock on one of a semaphore's slots,
//! acquired by the core's `Acquire::permit` through the client's one loop (`run`).

use std::time::{Duration, Instant};

use super::Redlock;
use crate::core::op::{self, Retry};
use crate::error::Error;
use crate::lock::Lock;
use crate::observe::OpSpan;

impl Redlock {
    /// Acquires a permit of `semaphore` for `ttl`: a lock on one of its slots (see
    /// [`Semaphore`](crate::Semaphore)), retrying as [`lock`](Redlock::lock) does, with the
    /// retry delay between tries (a permit waits without wake-ups). The permit is released
    /// and extended as any lock ([`unlock`](Redlock::unlock), [`extend`](Redlock::extend),
    /// a guard); [`Semaphore::slot_of`](crate::Semaphore::slot_of) of its resource says
    /// which slot it holds. It carries no fencing token.
    ///
    /// Errors as `lock`: [`Error::Conflict`] when every slot stayed held.
    pub fn acquire_permit(
        &self,
        semaphore: &crate::Semaphore,
        ttl: Duration,
    ) -> Result<Lock, Error> {
        self.permit(semaphore, ttl, Retry::new(&self.shared.config))
    }

    /// [`acquire_permit`](Redlock::acquire_permit), trying for up to `max_wait` as
    /// [`lock_within`](Redlock::lock_within) does.
    pub fn acquire_permit_within(
        &self,
        semaphore: &crate::Semaphore,
        ttl: Duration,
        max_wait: Duration,
    ) -> Result<Lock, Error> {
        let retry = Retry::within(&self.shared.config, max_wait, Instant::now());
        self.permit(semaphore, ttl, retry)
    }

    /// One try of [`acquire_permit`](Redlock::acquire_permit), no retries: on failure the
    /// token is released from every slot before this returns.
    pub fn try_acquire_permit(
        &self,
        semaphore: &crate::Semaphore,
        ttl: Duration,
    ) -> Result<Lock, Error> {
        self.permit(semaphore, ttl, Retry::once())
    }

    fn permit(
        &self,
        semaphore: &crate::Semaphore,
        ttl: Duration,
        retry: Retry,
    ) -> Result<Lock, Error> {
        let span = OpSpan::new("acquire", semaphore.name());
        let result = self
            .run(op::Acquire::permit(semaphore, ttl, retry))
            .map(Lock);
        span.finish_acquire(&result);
        result
    }
}
