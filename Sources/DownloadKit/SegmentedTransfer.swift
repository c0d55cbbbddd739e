import Foundation
import Glibc
import HTTPClient
import HTTPWire

/// The shared segment map of a segmented download: which byte ranges exist, how far each has been
/// written, and which worker owns each. All access goes through one lock, taken once per received
/// buffer (≥ 64 KiB), never per byte.
final class SegmentBoard: Sendable {
    struct Segment {
        var start: Int64
        /// Exclusive end; may shrink when another worker steals the tail.
        var end: Int64
        var written: Int64
        var owner: Int?
        /// End of the owner's request in flight (`position` when none): a steal never cuts below it,
        /// so the owner's connection is never dropped mid-response.
        var requestedEnd: Int64 = 0

        var position: Int64 { start + written }
        var remaining: Int64 { end - position }

        /// Where a thief may split this segment: at half of what is left after `from`, 64 KiB aligned;
        /// nil when the stolen part would be below `minimum`. With `sparingTheRequest`, `from` is the end
        /// of the request in flight (the owner keeps its connection); otherwise the owner's position
        /// (the owner drops its connection when it reaches the new end: only for rescuing a stalled tail).
        func splitPoint(minimum: Int64, sparingTheRequest: Bool) -> Int64? {
            let from = sparingTheRequest ? max(position, requestedEnd) : position
            var middle = from + (end - from) / 2
            middle = (middle + 0xFFFF) & ~0xFFFF
            guard middle > from, end - middle >= minimum else { return nil }
            return middle
        }
    }

    /// Why the transfer stopped early.
    enum Stop {
        case failed(DownloadError)
        case restart(RestartReason)
        case stopped
    }

    private struct State {
        var segments: [Segment]
        var stop: Stop?
        var active = 0
    }

    private let state: LockedValue<State>
    let minimumSplit: Int64

    init(segments: [Segment], minimumSegmentSize: Int64) {
        state = LockedValue(State(segments: segments.sorted { $0.start < $1.start }))
        minimumSplit = max(64 << 10, minimumSegmentSize)
    }

    /// Splits `[from, total)` into `count` nearly equal segments, each at least `minimumSegmentSize`.
    static func plan(from: Int64, total: Int64, count: Int, minimumSegmentSize: Int64) -> [Segment] {
        let length = total - from
        guard length > 0 else { return [] }
        let pieces = Int(max(1, min(Int64(count), length / max(1, minimumSegmentSize))))
        let size = length / Int64(pieces)
        return (0..<pieces).map { index in
            let start = from + Int64(index) * size
            let end = index == pieces - 1 ? total : start + size
            return Segment(start: start, end: end, written: 0, owner: nil)
        }
    }

    /// Gives worker `worker` a segment: an unowned one with bytes left, else the second half of the
    /// largest remaining one (work stealing), else nil when nothing is left worth splitting.
    func take(worker: Int) -> (start: Int64, end: Int64)? {
        state.withLock { state in
            if state.stop != nil { return nil }
            if let index = state.segments.indices.first(where: { state.segments[$0].owner == nil && state.segments[$0].remaining > 0 }) {
                state.segments[index].owner = worker
                state.active += 1
                return (state.segments[index].position, state.segments[index].end)
            }
            // Steal the second half of what the busiest owner has not asked for yet; failing that (a
            // request in flight covers all of it), cut into a request, which costs its connection.
            func candidates(sparingTheRequest: Bool) -> [(index: Int, middle: Int64)] {
                state.segments.indices.compactMap { index -> (index: Int, middle: Int64)? in
                    guard state.segments[index].owner != nil,
                        let middle = state.segments[index].splitPoint(
                            minimum: minimumSplit, sparingTheRequest: sparingTheRequest)
                    else { return nil }
                    return (index, middle)
                }
            }
            var choices = candidates(sparingTheRequest: true)
            if choices.isEmpty { choices = candidates(sparingTheRequest: false) }
            guard let (victim, middle) = choices.max(by: {
                state.segments[$0.index].end - $0.middle < state.segments[$1.index].end - $1.middle
            }) else { return nil }
            let old = state.segments[victim]
            state.segments[victim].end = middle
            let stolen = Segment(start: middle, end: old.end, written: 0, owner: worker, requestedEnd: middle)
            state.segments.insert(stolen, at: victim + 1)
            state.active += 1
            return (middle, old.end)
        }
    }

    /// Records `count` bytes written at `position` by the owner of the segment starting at or before
    /// it. Returns how many of them belong to the segment (its end may have shrunk) and whether the
    /// segment still wants more.
    func record(position: Int64, count: Int64) -> (accepted: Int64, wantsMore: Bool) {
        state.withLock { state in
            guard let index = state.segments.lastIndex(where: { $0.start <= position }) else { return (0, false) }
            var segment = state.segments[index]
            guard segment.position == position else { return (0, false) }
            let accepted = max(0, min(count, segment.end - position))
            segment.written += accepted
            state.segments[index] = segment
            return (accepted, segment.remaining > 0 && state.stop == nil)
        }
    }

    /// Marks a request from `position` of at most `maximum` bytes as in flight; returns its end
    /// (exclusive), or `position` when the segment has nothing left there.
    func beginRequest(at position: Int64, maximum: Int64) -> Int64 {
        state.withLock { state in
            guard let index = state.segments.lastIndex(where: { $0.start <= position }),
                state.segments[index].position == position
            else { return position }
            let end = min(state.segments[index].end, position + maximum)
            state.segments[index].requestedEnd = end
            return end
        }
    }

    /// The bytes the owner may still write from `position` (0 when the segment shrank below it).
    func limit(at position: Int64) -> Int64 {
        state.withLock { state in
            guard let index = state.segments.lastIndex(where: { $0.start <= position }) else { return 0 }
            let segment = state.segments[index]
            return segment.position == position ? segment.remaining : 0
        }
    }

    /// Gives a segment back (finished, or its worker is leaving).
    func release(start: Int64, worker: Int) {
        state.withLock { state in
            if let index = state.segments.lastIndex(where: { $0.start <= start }), state.segments[index].owner == worker {
                state.segments[index].owner = nil
                state.active -= 1
            }
        }
    }

    /// Stops every worker; the first reason wins.
    func stop(_ reason: Stop) {
        state.withLock { state in
            if state.stop == nil { state.stop = reason }
        }
    }

    var stopReason: Stop? { state.withLock { $0.stop } }
    var activeConnections: Int { state.withLock { $0.active } }
    var written: Int64 { state.withLock { $0.segments.reduce(0) { $0 + $1.written } } }
    var isComplete: Bool { state.withLock { $0.segments.allSatisfy { $0.remaining == 0 } } }

    /// The map for the resume info. Taken before the data is synced, so it never claims more than
    /// what the sync that follows makes durable.
    func snapshot() -> [ResumeSegment] {
        state.withLock { state in
            state.segments.map { ResumeSegment(start: $0.start, end: $0.end, written: $0.written) }
        }
    }
}

/// A file descriptor shared by the segment workers. `pwrite` at distinct offsets is safe from many
/// threads on one descriptor (POSIX positional I/O does not use the shared file offset), and the
/// handle outlives every worker (the coordinator joins them), hence `@unchecked Sendable`.
struct SharedFile: @unchecked Sendable {
    let handle: FileHandleFD
}

/// One segment worker: a thread that requests byte ranges and writes them at their offsets.
struct SegmentWorker: Sendable {
    let id: Int
    let board: SegmentBoard
    let file: SharedFile
    let client: HTTPClient
    let url: HTTPURL
    let headers: HTTPHeaders
    let ifRange: String?
    let entityTag: EntityTag?
    let total: Int64
    let retries: Int
    let retryBaseDelay: Double
    let maxRetryDelay: Double
    let bufferSize: Int
    let rateLimiters: [TokenBucket]
    let cancellation: CancellationToken
    let control: DownloadControl

    /// Thrown from the body callback when the segment's end moved below the bytes just received.
    private struct SegmentEnded: Error {}

    /// The most one range request asks for: at 26 MB/s a 4 MiB request lasts about 160 ms, short
    /// enough that the tail is shared out, long enough that per-request costs stay negligible.
    static let requestSize: Int64 = 4 << 20

    func run() {
        let buffer = ReceiveBuffer(capacity: bufferSize)
        while let (start, _) = board.take(worker: id) {
            var failures = 0
            var position = start
            defer { board.release(start: start, worker: id) }
            while board.limit(at: position) > 0 {
                if board.stopReason != nil || control.stopRequest != .none { return }
                let before = position
                do {
                    try fetch(from: &position, buffer: buffer)
                } catch is SegmentEnded {
                    break
                } catch {
                    let failure = DownloadError.wrap(error)
                    if board.stopReason != nil || control.stopRequest != .none || failure.code == .cancelled { return }
                    if position - before >= 64 << 10 { failures = 0 }
                    if let restart = failure.restartReason {
                        board.stop(.restart(restart))
                        return
                    }
                    guard failure.isTransient, failures < retries else {
                        board.stop(.failed(failure))
                        return
                    }
                    failures += 1
                    let delay = TransferEngine.backoffDelay(attempt: failures, base: retryBaseDelay, maximum: maxRetryDelay)
                    if !interruptibleSleep(delay, shouldStop: { board.stopReason != nil || control.stopRequest != .none }) {
                        return
                    }
                }
            }
        }
    }

    /// One range request for the rest of the current segment.
    private func fetch(from position: inout Int64, buffer: ReceiveBuffer) throws {
        // Bounded requests keep the tail stealable: a thief takes only what no request covers yet.
        let end = board.beginRequest(at: position, maximum: Self.requestSize)
        guard end > position else { return }
        var requestHeaders = headers
        requestHeaders.replaceOrAdd(
            name: "Range", value: RangeHeader(ranges: [.closed(first: position, last: end - 1)]).headerValue)
        if let ifRange { requestHeaders.replaceOrAdd(name: "If-Range", value: ifRange) }
        let requested = position
        var cursor = position
        defer { position = cursor }
        _ = try client.execute(
            HTTPRequest(method: .GET, url: url, headers: requestHeaders), cancellation: cancellation, buffer: buffer,
            onHead: { head in
                try validate(head, requested: requested)
                return .stream
            },
            onBody: { bytes in
                // The segment may have shrunk (its tail stolen): write only what still belongs to it.
                let limit = board.limit(at: cursor)
                guard limit > 0 else { throw SegmentEnded() }
                let allowed = Int(min(Int64(bytes.count), limit))
                var written = 0
                do {
                    try file.handle.write(
                        UnsafeRawBufferPointer(rebasing: bytes[0..<allowed]), toAbsoluteOffset: cursor, written: &written)
                } catch {
                    cursor += board.record(position: cursor, count: Int64(written)).accepted
                    throw error
                }
                cursor += board.record(position: cursor, count: Int64(allowed)).accepted
                if allowed < bytes.count { throw SegmentEnded() }
                if !rateLimiters.isEmpty {
                    var delay = 0.0
                    for limiter in rateLimiters { delay = max(delay, limiter.delay(afterConsuming: allowed)) }
                    if delay > 0, !interruptibleSleep(delay, shouldStop: { control.stopRequest != .none }) {
                        throw DownloadError(.cancelled, "stopped")
                    }
                }
            })
    }

    /// A 206 must cover exactly the asked start, carry the known total and the same validator;
    /// anything else is never written (issue #5: "a segment that comes back wrong is retried").
    private func validate(_ head: ResponseHead, requested: Int64) throws {
        switch head.status {
        case 206:
            guard let text = head.headers.first(name: "Content-Range"), let range = try? ContentRange(parsing: text),
                case .satisfied(let first, _, let complete) = range
            else {
                throw DownloadError(
                    .contentRangeMismatch, "206 without a valid Content-Range for a segment", httpStatus: 206,
                    isTransient: true)
            }
            if let tag = head.headers.first(name: "ETag").flatMap({ try? EntityTag(parsing: $0) }), let known = entityTag,
                !known.strongMatches(tag)
            {
                throw DownloadError.restart(.validatorChanged)
            }
            if let complete, complete != total { throw DownloadError.restart(.lengthChanged) }
            guard first == requested else {
                throw DownloadError(
                    .contentRangeMismatch,
                    "range mismatch: a segment asked for bytes from \(requested), the server sent \(text)",
                    httpStatus: 206, isTransient: true)
            }
        case 200:
            // If-Range failed (the resource changed) or the server stopped honouring ranges.
            throw DownloadError.restart(ifRange == nil ? .rangeIgnored : .validatorChanged)
        default:
            throw DownloadError.status(head.status, reason: head.reason, url: url)
        }
    }
}

extension DownloadError {
    /// An internal signal that the partial data must be discarded and the download started over.
    static func restart(_ reason: RestartReason) -> DownloadError {
        var error = DownloadError(.serverIgnoredRange, "restart: \(reason.rawValue)")
        error.restartReason = reason
        return error
    }
}
