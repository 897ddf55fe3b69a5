//! Bodies streamed at a limit's rate (`ThrottledBody`), on tokio's paused
//! clock with the limits on `TokioClock`: every piece is sent when its
//! tokens exist, never earlier and less than a millisecond later (tokio's
//! timer resolution; the lateness never accumulates, since each piece is
//! due by the bucket's schedule, not by when the last one went), a chunk
//! larger than the burst is split, a body dropped mid-wait gives its
//! reservation back, and each key of a keyed limiter streams at its own
//! rate. The rates are a whole number of nanoseconds per byte (1 MB/s),
//! so that every due time is exact.

use std::collections::VecDeque;
use std::convert::Infallible;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http::HeaderMap;
use http_body::{Body, Frame};
use http_body_util::BodyExt;
use tokio::time::Instant;
use tollgate::http::tower::ThrottledBody;
use tollgate::{KeyedLimiter, Limit, OwnedKey, Quota, TokenBucket, TokioClock};

/// A megabyte: the burst, and the bytes a second.
const MB: u64 = 1_000_000;

/// tokio's timer resolution: how late a piece may be sent.
const TICK: Duration = Duration::from_millis(1);

/// A body of ready frames: `chunks` data frames, then `trailers` if any.
struct Chunks {
    frames: VecDeque<Frame<Bytes>>,
}

impl Chunks {
    fn new(sizes: &[usize], trailers: Option<HeaderMap>) -> Chunks {
        let mut frames: VecDeque<Frame<Bytes>> = sizes
            .iter()
            .map(|&n| Frame::data(Bytes::from(vec![7; n])))
            .collect();
        frames.extend(trailers.map(Frame::trailers));
        Chunks { frames }
    }
}

impl Body for Chunks {
    type Data = Bytes;
    type Error = Infallible;
    fn poll_frame(
        mut self: Pin<&mut Self>,
        _: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        Poll::Ready(self.frames.pop_front().map(Ok))
    }
}

/// 1 MB a second (a byte every microsecond) with a burst of 1 MB, on
/// tokio's clock.
fn mb_per_second() -> Arc<TokenBucket<TokioClock>> {
    Arc::new(TokenBucket::with_clock(
        Quota::per_second(MB).unwrap(),
        TokioClock::new(),
    ))
}

/// Whether a piece sent at `at` was sent when due, within tokio's tick.
fn on_time(at: Duration, due: Duration) -> bool {
    due <= at && at < due + TICK
}

/// Sends `body` to the end, recording when each data frame came and its size.
async fn drain<B: Body<Data = Bytes> + Unpin>(mut body: B) -> Vec<(Duration, u64)>
where
    B::Error: std::fmt::Debug,
{
    let started = Instant::now();
    let mut sent = Vec::new();
    while let Some(frame) = body.frame().await {
        if let Ok(data) = frame.unwrap().into_data() {
            sent.push((started.elapsed(), data.len() as u64));
        }
    }
    sent
}

/// Each 62.5 kB chunk of 5 MB is sent when its bytes exist: the first MB
/// at once (the burst), then one chunk every 62.5 ms, the last at 4 s; so
/// the bytes sent by any instant never exceed the burst plus the refill,
/// and never fall more than a tick's refill short of it.
#[tokio::test(start_paused = true)]
async fn a_download_is_sent_at_its_rate() {
    let body = ThrottledBody::new(Chunks::new(&[62_500; 80], None), mb_per_second());
    let sent = drain(body).await;
    assert_eq!(sent.len(), 80);
    let mut total = 0;
    for (i, &(at, size)) in sent.iter().enumerate() {
        total += size;
        // Due when the burst plus the refill covers everything sent so far.
        let due = Duration::from_micros(total.saturating_sub(MB));
        assert!(on_time(at, due), "chunk {i} sent at {at:?}, due at {due:?}");
    }
    assert_eq!(total, 5 * MB);
    // 4 MB past the burst at 1 MB/s: 4 s, the rate achieved to a tick.
    assert!(on_time(sent.last().unwrap().0, Duration::from_secs(4)));
}

/// A chunk larger than the burst is split into pieces of the capacity,
/// each sent when it is due; trailers pass through after the data.
#[tokio::test(start_paused = true)]
async fn a_chunk_larger_than_the_burst_is_split_and_trailers_pass() {
    let mut trailers = HeaderMap::new();
    trailers.insert("x-checksum", "abc".parse().unwrap());
    let body = ThrottledBody::new(
        Chunks::new(&[3 * MB as usize], Some(trailers)),
        mb_per_second(),
    );
    let collected = body.collect().await.unwrap();
    assert_eq!(collected.trailers().unwrap()["x-checksum"], "abc");
    let body = ThrottledBody::new(Chunks::new(&[3 * MB as usize], None), mb_per_second());
    let sent = drain(body).await;
    assert_eq!(
        sent.iter().map(|&(_, size)| size).collect::<Vec<_>>(),
        [MB; 3]
    );
    for (i, &(at, _)) in sent.iter().enumerate() {
        assert!(
            on_time(at, Duration::from_secs(i as u64)),
            "piece {i} at {at:?}"
        );
    }
}

/// A body dropped while a piece waits for its tokens gives that piece's
/// reservation back: the bucket is as if it had never been asked for.
#[tokio::test(start_paused = true)]
async fn a_download_dropped_mid_wait_gives_its_reservation_back() {
    let bucket = mb_per_second();
    let mut body = ThrottledBody::new(
        Chunks::new(&[MB as usize, (MB / 2) as usize], None),
        Arc::clone(&bucket),
    );
    assert_eq!(
        body.frame()
            .await
            .unwrap()
            .unwrap()
            .into_data()
            .unwrap()
            .len() as u64,
        MB
    );
    let after_the_first = bucket.retry_after(1).unwrap();
    assert_eq!(after_the_first, Duration::from_micros(1));
    // The second piece is reserved and waits half a second.
    let waiting = {
        let mut cx = Context::from_waker(std::task::Waker::noop());
        Pin::new(&mut body).poll_frame(&mut cx).is_pending()
    };
    assert!(waiting);
    assert_eq!(
        bucket.retry_after(1).unwrap(),
        Duration::from_micros(500_001),
        "half a MB in debt"
    );
    drop(body);
    // Only the first MB stays spent: exactly as before the reservation.
    assert_eq!(bucket.retry_after(1).unwrap(), after_the_first);
}

/// Each client's download runs at its own key's rate: two at once take as
/// long as one alone, and a third key's budget is untouched.
#[tokio::test(start_paused = true)]
async fn each_key_streams_at_its_own_rate() {
    let per_client = Arc::new(
        KeyedLimiter::builder(Quota::per_second(MB).unwrap())
            .clock(TokioClock::new())
            .build::<String>(),
    );
    let download = |client: &str| {
        let key = OwnedKey::new(Arc::clone(&per_client), client.to_owned());
        drain(ThrottledBody::new(
            Chunks::new(&[(MB / 4) as usize; 12], None),
            key,
        ))
    };
    let (a, b) = tokio::join!(download("a"), download("b"));
    assert!(
        on_time(a.last().unwrap().0, Duration::from_secs(2)),
        "{a:?}"
    );
    assert!(
        on_time(b.last().unwrap().0, Duration::from_secs(2)),
        "{b:?}"
    );
    assert_eq!(per_client.key("c").available(), MB);
}

/// Through a fixed window, which reserves within its current window only:
/// a piece the window has no room for waits until the window turns (the
/// wait the window reports), then goes.
#[tokio::test(start_paused = true)]
async fn a_window_counter_paces_a_body_window_by_window() {
    use tollgate::{FixedWindow, WindowQuota};
    let per_second = Arc::new(
        FixedWindow::with_clock(WindowQuota::per_second(1_000).unwrap(), TokioClock::new())
            .unwrap(),
    );
    let body = ThrottledBody::new(Chunks::new(&[2_500], None), Arc::clone(&per_second));
    let sent = drain(body).await;
    assert_eq!(
        sent.iter().map(|&(_, size)| size).collect::<Vec<_>>(),
        [1_000, 1_000, 500]
    );
    for (i, &(at, _)) in sent.iter().enumerate() {
        assert!(
            on_time(at, Duration::from_secs(i as u64)),
            "piece {i} at {at:?}"
        );
    }
}

/// A quota lowered mid-stream below the piece in hand: the piece is cut
/// to the new capacity and every byte still goes, in order.
#[tokio::test(start_paused = true)]
async fn a_capacity_lowered_mid_stream_cuts_the_pieces_to_it() {
    let bucket = mb_per_second();
    let mut body = ThrottledBody::new(Chunks::new(&[2 * MB as usize], None), Arc::clone(&bucket));
    assert_eq!(
        body.frame()
            .await
            .unwrap()
            .unwrap()
            .into_data()
            .unwrap()
            .len() as u64,
        MB
    );
    bucket.set_quota(Quota::new(250_000, 1_000_000, Duration::from_secs(1)).unwrap());
    let rest = drain(body).await;
    assert_eq!(
        rest.iter().map(|&(_, size)| size).collect::<Vec<_>>(),
        [250_000; 4]
    );
}
