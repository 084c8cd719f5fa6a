//! Semaphores on the async client: a permit is a lock on one of a semaphore's slots,
//! acquired by the core's `Acquire::permit` through the client's one loop (`run`).

use std::time::{Duration, Instant};

use super::{AsyncRedlock, LockGuard};
use crate::core::keepalive::{self, KeepAlive};
use crate::core::op::{self, Retry};
use crate::error::Error;
use crate::lock::Lock;
use crate::observe::OpSpan;

impl AsyncRedlock {
    /// Acquires a permit of `semaphore` for `ttl`, with retries. As
    /// [`Redlock::acquire_permit`](crate::Redlock::acquire_permit).
    pub async fn acquire_permit(
        &self,
        semaphore: &crate::Semaphore,
        ttl: Duration,
    ) -> Result<Lock, Error> {
        let retry = Retry::new(&self.inner.config);
        self.permit(semaphore, ttl, retry).await
    }

    /// [`acquire_permit`](Self::acquire_permit), trying for up to `max_wait` as
    /// [`lock_within`](Self::lock_within) does.
    pub async fn acquire_permit_within(
        &self,
        semaphore: &crate::Semaphore,
        ttl: Duration,
        max_wait: Duration,
    ) -> Result<Lock, Error> {
        let retry = Retry::within(&self.inner.config, max_wait, Instant::now());
        self.permit(semaphore, ttl, retry).await
    }

    /// One try of [`acquire_permit`](Self::acquire_permit), no retries.
    pub async fn try_acquire_permit(
        &self,
        semaphore: &crate::Semaphore,
        ttl: Duration,
    ) -> Result<Lock, Error> {
        self.permit(semaphore, ttl, Retry::once()).await
    }

    async fn permit(
        &self,
        semaphore: &crate::Semaphore,
        ttl: Duration,
        retry: Retry,
    ) -> Result<Lock, Error> {
        let span = OpSpan::new("acquire", semaphore.name());
        let result = self
            .run(op::Acquire::permit(semaphore, ttl, retry))
            .await
            .map(Lock);
        span.finish_acquire(&result);
        result
    }

    /// [`acquire_permit`](Self::acquire_permit), the permit then kept alive in the background
    /// by `keep_alive` (as [`lock_many_guarded_with`](Self::lock_many_guarded_with)); a ttl
    /// too short to be kept alive is refused before anything is acquired.
    pub async fn acquire_permit_guarded_with(
        &self,
        semaphore: &crate::Semaphore,
        ttl: Duration,
        keep_alive: KeepAlive,
    ) -> Result<LockGuard, Error> {
        keepalive::check_ttl(&self.inner.config, ttl)?;
        let lock = self.acquire_permit(semaphore, ttl).await?;
        Ok(self.keep_alive(lock, keep_alive))
    }

    /// [`acquire_permit_within`](Self::acquire_permit_within), the permit then kept alive as
    /// [`acquire_permit_guarded_with`](Self::acquire_permit_guarded_with) keeps it.
    pub async fn acquire_permit_guarded_within(
        &self,
        semaphore: &crate::Semaphore,
        ttl: Duration,
        max_wait: Duration,
        keep_alive: KeepAlive,
    ) -> Result<LockGuard, Error> {
        keepalive::check_ttl(&self.inner.config, ttl)?;
        let lock = self.acquire_permit_within(semaphore, ttl, max_wait).await?;
        Ok(self.keep_alive(lock, keep_alive))
    }
}
