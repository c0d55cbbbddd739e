/// Whether a segment worker sends its next range request ahead, while the current response is still
/// arriving (HTTP/1.1 pipelining) — decided from what the worker's own connections measured, as a
/// value: events in, a yes or no out.
///
/// Sending ahead saves the wait between one response's end and the next one's first byte: a round trip
/// plus the server's turnaround. On loopback against nginx (one worker, 16 connections capped at 26 MB/s
/// each) that wait is about 2 ms of a 160 ms request, and nginx then paces the responses to requests sent
/// ahead 5–7 % slower — a plain Python client showed the same (docs/BENCHMARKS.md, "Sending range
/// requests ahead") — so there it costs more than it saves. Over a real path the wait is at least a
/// round trip, tens of milliseconds, and sending ahead wins. The rule: send ahead once the shortest wait
/// measured for a response head on a reused connection is at least ``threshold`` of the time a whole
/// request's body takes at the rate last measured.
struct SendAheadRule: Sendable, Equatable {
    /// The share of a request's transfer time the wait must reach.
    static let threshold = 0.1

    /// The request size the decision is about (a segment worker's ``SegmentWorker/requestSize``).
    let requestSize: Int64
    /// The shortest wait from handing a request over to its response head, on a reused connection.
    private(set) var shortestWait: Double?
    /// Seconds per body byte of the last response long enough to measure.
    private(set) var secondsPerByte: Double?
    private var askedAt: Double?
    private var headAt: Double?
    private var pendingWait: Double?

    init(requestSize: Int64) {
        self.requestSize = requestSize
    }

    /// A request was handed over to be sent at once (not ahead): its wait starts now.
    mutating func asked(at now: Double) {
        askedAt = now
        headAt = nil
        pendingWait = nil
    }

    /// A response head arrived. The wait counts once the response shows its connection was reused (a new
    /// connection's wait includes the connect and handshake).
    mutating func headArrived(at now: Double) {
        pendingWait = askedAt.map { now - $0 }
        askedAt = nil
        headAt = now
    }

    /// A response ended after `bytes` body bytes.
    mutating func responseEnded(at now: Double, bytes: Int64, connectionReused: Bool, wasSentAhead: Bool) {
        if let wait = pendingWait, connectionReused, !wasSentAhead {
            shortestWait = min(shortestWait ?? wait, wait)
        }
        // Short bodies (a segment's last bytes) say little about the rate.
        if let headAt, bytes >= min(requestSize, 256 << 10), now > headAt {
            secondsPerByte = (now - headAt) / Double(bytes)
        }
        pendingWait = nil
        headAt = nil
    }

    /// Whether the next request should be sent ahead.
    var sendsAhead: Bool {
        guard let shortestWait, let secondsPerByte else { return false }
        return shortestWait >= Self.threshold * secondsPerByte * Double(requestSize)
    }
}
