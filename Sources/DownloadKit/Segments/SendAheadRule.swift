import HTTPClient

/// Whether a segment worker sends its next range request ahead, while the current response is still
/// arriving (HTTP/1.1 pipelining) — decided from what the download's connections measured, as a value:
/// events in, a yes or no out.
///
/// Sending ahead saves the wait between one response's end and the next one's first byte: a round trip
/// plus the server's turnaround. On loopback against nginx (one worker, 16 connections capped at 26 MB/s
/// each) that wait is about 2 ms of a 160 ms request, and nginx then paces the responses to requests sent
/// ahead 5–7 % slower — a plain Python client showed the same (docs/BENCHMARKS.md, "Sending range
/// requests ahead") — so there it costs more than it saves. Over a real path the wait is at least a
/// round trip, tens of milliseconds, and sending ahead wins. The rule: send ahead once the shortest wait
/// measured for a response head is at least ``threshold`` of the time a whole request's body takes at
/// the rate last measured.
///
/// A wait runs from the moment the request was written on its connection (``DKHTTPClient``'s `onSent`:
/// connected, handshake done) to its response head, so a new connection's first request measures the
/// round trip as well as a reused one's; and it counts as soon as the head arrives, as does the rate of
/// a response still arriving (``bodyProgress(at:bytes:)``). The decision for a connection's second
/// request is thus made while its first response arrives. Until both counted only at a response's end,
/// and only on a reused connection (a wait from before the connect included it), every connection of
/// a 50 ms path idled two round trips before its second and third requests — about 4 % of the capped
/// rate over 8 connections (docs/BENCHMARKS.md, "Sending range requests ahead").
///
/// The wait is a property of the path and the origin, not of one connection, so the shortest counts
/// whichever of the download's connections measured it (``learned(shortestWait:)``, shared through
/// ``SharedShortestWait``). A connection alone decides from its first wait, and a response to a request
/// sent ahead measures none, so one slow first head — nginx's one worker still busy with the other
/// connections' first chunks, 25–56 ms for 4 of 8 connections in 2 of 16 runs by hand — kept that
/// connection sending ahead for the whole download, where nginx paces the responses more slowly
/// (docs/BENCHMARKS.md, "One slow first head").
struct SendAheadRule: Sendable, Equatable {
    /// The share of a request's transfer time the wait must reach.
    static let threshold = 0.1

    /// The request size the decision is about (a segment worker's ``SegmentWorker/requestSize``).
    let requestSize: Int64
    /// The shortest wait from writing a request to its response head.
    private(set) var shortestWait: Double?
    /// Seconds per body byte of the latest response long enough to measure (complete or arriving).
    private(set) var secondsPerByte: Double?
    private var sentAt: Double?
    private var headAt: Double?

    init(requestSize: Int64) {
        self.requestSize = requestSize
    }

    /// The smallest body that says something about the rate (a segment's last bytes do not).
    private var measurableBytes: Int64 { min(requestSize, 256 << 10) }

    /// A request not sent ahead was written on its connection: its wait starts now.
    mutating func sent(at now: Double) {
        sentAt = now
        headAt = nil
    }

    /// A response head arrived: the wait of a request sent at once counts now; a response to a request
    /// sent ahead has no wait of its own.
    mutating func headArrived(at now: Double) {
        if let sentAt, now >= sentAt {
            shortestWait = min(shortestWait ?? (now - sentAt), now - sentAt)
        }
        sentAt = nil
        headAt = now
    }

    /// Another connection of the same download measured `shortestWait` (nil: none yet): the shorter of it
    /// and this connection's own counts.
    mutating func learned(shortestWait other: Double?) {
        guard let other else { return }
        shortestWait = min(shortestWait ?? other, other)
    }

    /// `bytes` body bytes of the current response have arrived by `now`.
    mutating func bodyProgress(at now: Double, bytes: Int64) {
        if let headAt, bytes >= measurableBytes, now > headAt {
            secondsPerByte = (now - headAt) / Double(bytes)
        }
    }

    /// The current response ended after `bytes` body bytes.
    mutating func responseEnded(at now: Double, bytes: Int64) {
        bodyProgress(at: now, bytes: bytes)
        headAt = nil
    }

    /// Whether the next request should be sent ahead.
    var sendsAhead: Bool {
        guard let shortestWait, let secondsPerByte else { return false }
        return shortestWait >= Self.threshold * secondsPerByte * Double(requestSize)
    }
}

/// The shortest wait any segment worker of one download measured (``SendAheadRule``): each worker folds
/// its own in and takes the result back.
final class SharedShortestWait: Sendable {
    private let shortest = LockedValue<Double?>(nil)

    init() {}

    /// Folds `wait` in and returns the shortest so far (nil while no worker measured one).
    func fold(_ wait: Double?) -> Double? {
        shortest.withLock { shortest in
            if let wait { shortest = min(shortest ?? wait, wait) }
            return shortest
        }
    }
}
