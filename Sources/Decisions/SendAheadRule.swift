/// Whether a segment worker sends its next range request ahead, while the current response is still
/// arriving (HTTP/1.1 pipelining) — decided from what the download's connections measured, as a value:
/// events in (times are inputs), a yes or no out.
///
/// Sending ahead saves the wait between one response's end and the next one's first byte: a round trip
/// plus the server's turnaround. Where that wait is tiny (loopback), an origin may pace responses to
/// requests sent ahead more slowly, so sending ahead costs more than it saves; over a real path the
/// wait is at least a round trip and sending ahead wins (docs/BENCHMARKS.md, "Sending range requests
/// ahead", has the measurements). The rule: send ahead once the shortest wait measured for a response
/// head is at least ``threshold`` of the time a whole request's body takes at the rate last measured.
///
/// A wait runs from the moment the request was written on its connection (connected, handshake done)
/// to its response head, so a new connection's first request measures the round trip as well as a
/// reused one's; and it counts as soon as the head arrives, as does the rate of a response still
/// arriving (``bodyProgress(at:bytes:)``). The decision for a connection's second request is thus made
/// while its first response arrives: counting both only at a response's end made every connection idle
/// two round trips before its second and third requests.
///
/// The wait is a property of the path and the origin, not of one connection, so the shortest counts
/// whichever of the download's connections measured it (``learned(shortestWait:)``, shared between the
/// workers by the engine). A connection alone decides from its first wait, and a response to a request
/// sent ahead measures none, so one slow first head (an origin still busy with the other connections'
/// first chunks) would keep that connection sending ahead for the whole download
/// (docs/BENCHMARKS.md, "One slow first head").
package struct SendAheadRule: Sendable, Equatable {
    /// The share of a request's transfer time the wait must reach.
    package static let threshold = 0.1

    /// The request size the decision is about (a segment worker's ``SegmentWorker/requestSize``).
    package let requestSize: Int64
    /// The shortest wait from writing a request to its response head.
    package private(set) var shortestWait: Double?
    /// Seconds per body byte of the latest response long enough to measure (complete or arriving).
    package private(set) var secondsPerByte: Double?
    private var sentAt: Double?
    private var headAt: Double?

    package init(requestSize: Int64) {
        self.requestSize = requestSize
    }

    /// The smallest body that says something about the rate (a segment's last bytes do not).
    private var measurableBytes: Int64 { min(requestSize, 256 << 10) }

    /// A request not sent ahead was written on its connection: its wait starts now.
    package mutating func sent(at now: Double) {
        sentAt = now
        headAt = nil
    }

    /// A response head arrived: the wait of a request sent at once counts now; a response to a request
    /// sent ahead has no wait of its own.
    package mutating func headArrived(at now: Double) {
        if let sentAt, now >= sentAt {
            shortestWait = min(shortestWait ?? (now - sentAt), now - sentAt)
        }
        sentAt = nil
        headAt = now
    }

    /// Another connection of the same download measured `shortestWait` (nil: none yet): the shorter of it
    /// and this connection's own counts.
    package mutating func learned(shortestWait other: Double?) {
        guard let other else { return }
        shortestWait = min(shortestWait ?? other, other)
    }

    /// `bytes` body bytes of the current response have arrived by `now`.
    package mutating func bodyProgress(at now: Double, bytes: Int64) {
        if let headAt, bytes >= measurableBytes, now > headAt {
            secondsPerByte = (now - headAt) / Double(bytes)
        }
    }

    /// The current response ended after `bytes` body bytes.
    package mutating func responseEnded(at now: Double, bytes: Int64) {
        bodyProgress(at: now, bytes: bytes)
        headAt = nil
    }

    /// Whether the next request should be sent ahead.
    package var sendsAhead: Bool {
        guard let shortestWait, let secondsPerByte else { return false }
        return shortestWait >= Self.threshold * secondsPerByte * Double(requestSize)
    }
}
