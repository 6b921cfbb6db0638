//! A listener for the metrics server ([`super`]) that bounds what callers can hold: at most
//! [`MAX_CONNECTIONS`] open connections (one more is closed at once), each for at most
//! [`CONNECTION_LIFETIME`] (then its reads and writes fail and it is closed). A scrape needs one
//! short connection; a caller that opens many or keeps them open (a slow-header attack on the
//! node's address) cannot take the agent's file descriptors or tasks from it.

use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio::time::Sleep;

/// Connections served at once.
pub const MAX_CONNECTIONS: usize = 8;
/// How long one connection may live.
pub const CONNECTION_LIFETIME: Duration = Duration::from_secs(15);

/// A [`TcpListener`] whose connections are limited (see the module docs).
#[derive(Debug)]
pub struct LimitedListener {
    inner: TcpListener,
    slots: Arc<Semaphore>,
}

impl LimitedListener {
    /// Wraps `inner`.
    pub fn new(inner: TcpListener) -> Self {
        LimitedListener {
            inner,
            slots: Arc::new(Semaphore::new(MAX_CONNECTIONS)),
        }
    }
}

impl axum::serve::Listener for LimitedListener {
    type Io = LimitedStream;
    type Addr = std::net::SocketAddr;

    async fn accept(&mut self) -> (Self::Io, Self::Addr) {
        loop {
            let (stream, address) = match self.inner.accept().await {
                Ok(accepted) => accepted,
                Err(error) => {
                    // Out of descriptors and the like: wait instead of spinning.
                    tracing::debug!(%error, "accepting a metrics connection failed");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                }
            };
            let Ok(permit) = self.slots.clone().try_acquire_owned() else {
                drop(stream);
                continue;
            };
            let stream = LimitedStream {
                inner: stream,
                deadline: Box::pin(tokio::time::sleep(CONNECTION_LIFETIME)),
                _permit: permit,
            };
            return (stream, address);
        }
    }

    fn local_addr(&self) -> io::Result<Self::Addr> {
        self.inner.local_addr()
    }
}

/// One connection of a [`LimitedListener`]: fails once its lifetime is over, and frees its
/// slot when dropped.
#[derive(Debug)]
pub struct LimitedStream {
    inner: TcpStream,
    deadline: Pin<Box<Sleep>>,
    _permit: OwnedSemaphorePermit,
}

impl LimitedStream {
    fn expired(&mut self, cx: &mut Context<'_>) -> bool {
        self.deadline.as_mut().poll(cx).is_ready()
    }
}

fn timed_out() -> io::Error {
    io::Error::new(io::ErrorKind::TimedOut, "metrics connection lifetime over")
}

impl AsyncRead for LimitedStream {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        if self.expired(cx) {
            return Poll::Ready(Err(timed_out()));
        }
        Pin::new(&mut self.inner).poll_read(cx, buf)
    }
}

impl AsyncWrite for LimitedStream {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        if self.expired(cx) {
            return Poll::Ready(Err(timed_out()));
        }
        Pin::new(&mut self.inner).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::serve::Listener;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    #[tokio::test]
    async fn connections_beyond_the_limit_are_closed_and_old_ones_expire() {
        tokio::time::pause();
        let inner = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let address = inner.local_addr().unwrap();
        let mut listener = LimitedListener::new(inner);
        let mut held = Vec::new();
        let mut accepted = Vec::new();
        for _ in 0..MAX_CONNECTIONS {
            held.push(TcpStream::connect(address).await.unwrap());
            accepted.push(listener.accept().await.0);
        }
        // One more: accepted by the kernel, closed by the listener without a slot.
        let mut extra = TcpStream::connect(address).await.unwrap();
        let accept_more = tokio::spawn(async move {
            let next = listener.accept().await;
            (listener, next)
        });
        let mut byte = [0u8; 1];
        assert_eq!(extra.read(&mut byte).await.unwrap(), 0, "closed at once");
        // A freed slot lets the next one in.
        drop(accepted.pop());
        let _late = TcpStream::connect(address).await.unwrap();
        let (_listener, (mut stream, _)) = accept_more.await.unwrap();
        tokio::time::advance(CONNECTION_LIFETIME + Duration::from_secs(1)).await;
        let error = stream.write_all(b"x").await.unwrap_err();
        assert_eq!(error.kind(), io::ErrorKind::TimedOut);
        drop(held);
    }
}
