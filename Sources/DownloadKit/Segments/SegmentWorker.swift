import DownloadKitDecisions
import Glibc
import HTTPClient
import HTTPWire

/// One segment worker: a thread that requests byte ranges of the segment it holds and writes them at
/// their offsets. It only executes: every rule (which segment, how many bytes may be written, what is
/// credited) is the board's (``SegmentBoardState``).
struct SegmentWorker: Sendable {
    let id: Int
    let board: SegmentBoard
    let file: SegmentFileWriter
    let journal: SegmentJournal?
    let client: DKHTTPClient
    let url: HTTPURL
    let headers: DKHTTPHeaders
    let ifRange: String?
    let entityTag: EntityTag?
    let total: Int64
    /// The retry rule (one per segment held, copied from this template).
    let retryPolicy: RetryPolicy
    let lowSpeedLimit: Int
    let lowSpeedTime: Double
    let bufferSize: Int
    let rateLimiters: [TokenBucket]
    let cancellation: CancellationToken
    let control: DownloadControl
    /// The shortest response wait of all this download's workers (``SendAheadRule/learned(shortestWait:)``).
    let sharedWait: SharedShortestWait
    /// Woken with every credited buffer's count, when the worker ends, and on a dropped source.
    let wakes: SegmentWakes
    /// The sources of a download with mirrors (docs/MIRRORS.md); nil: `url` is the only one.
    var sources: SourceBoard? = nil
    /// The piece checks of a download with piece checksums (``PieceVerifier``); nil: none.
    var pieces: PieceBoard? = nil

    /// Where the worker's requests go now: `url` (source 0, or the only one) or a mirror.
    private struct Target {
        /// The source's index on the ``SourceBoard``; nil without mirrors.
        let index: Int?
        let url: HTTPURL
        let headers: DKHTTPHeaders
        let ifRange: String?
        let entityTag: EntityTag?

        var isMirror: Bool { (index ?? 0) != 0 }
    }

    /// How one exchange of the worker ended — a value, so the worker's loop decides on it (with
    /// ``SegmentAttemptMachine``) instead of catching by error type.
    private enum FetchEnd {
        /// Every response ended as asked; the held segment may owe more.
        case fetched
        /// The segment ended inside the bytes just received (its tail was stolen): the response is dropped
        /// with its connection, never written past the segment's end.
        case rangeEnded
        /// A mirror's answer agrees on the length but needs a sample before its bytes are written.
        case needsSample
        /// The source was dropped (its answer disagreed, or a piece check dropped it).
        case sourceDropped
        /// An "expired URL" status (``SegmentAttemptMachine/expiredStatuses``).
        case expired(status: Int)
        /// The partial data no longer matches the resource: the download starts over (on a mirror: its failure).
        case restart(RestartReason)
        /// Any other failure: transport, a wrong answer, a file write, too slow, stopped.
        case failed(any Error)

        /// The failure this end stands for, where one is named (a restart keeps its reason).
        func failure(url: HTTPURL) -> DownloadError? {
            switch self {
            case .fetched, .rangeEnded, .needsSample, .sourceDropped: nil
            case .expired(let status): DownloadError.status(status, reason: "", url: url)
            case .restart(let reason): DownloadError.restart(reason)
            case .failed(let error): DownloadError.wrap(error)
            }
        }
    }

    /// Unwinds the HTTP client out of an exchange whose end is already decided (its callbacks can end an
    /// exchange only by throwing); the decision itself is the ``FetchEnd`` the callback recorded.
    private struct EndOfExchange: Error {}

    /// A piece this worker completed and has not settled yet (``settle(_:target:buffer:)``).
    private enum DuePiece {
        /// To be hashed and decided.
        case unchecked(Int)
        /// Decided bad: to be fetched again from this source.
        case refetch(Int, from: Int)
    }

    /// The most one range request asks for: short enough that the tail is shared out, long enough that
    /// per-request costs stay negligible.
    static let requestSize: Int64 = 4 << 20

    /// How many bytes the current response may still owe when the next request is sent ahead: half a
    /// request — more than a round trip on most paths, and the tail past the request in flight stays
    /// stealable until then.
    static let sendAheadOwed: Int64 = requestSize / 2

    func run() {
        let buffer = ReceiveBuffer(capacity: bufferSize)
        var lowSpeed = LowSpeedWindow(limit: lowSpeedLimit, seconds: lowSpeedTime)
        var sendAhead = SendAheadRule(requestSize: Self.requestSize)
        guard let sources else {
            _ = run(Target(index: nil, url: url, headers: headers, ifRange: ifRange, entityTag: entityTag),
                buffer: buffer, lowSpeed: &lowSpeed, sendAhead: &sendAhead)
            return
        }
        // A source for as long as it serves; when it is dropped, the next free one (``SourceScheduler/assign()``).
        while let index = sources.assign() {
            let target = target(index)
            lowSpeed.reset()
            sendAhead = SendAheadRule(requestSize: Self.requestSize)
            let leftSource = run(target, buffer: buffer, lowSpeed: &lowSpeed, sendAhead: &sendAhead)
            sources.release(index)
            if !leftSource { return }
        }
    }

    /// Where source `index`'s requests go: the first source keeps its validator, a mirror gets none.
    private func target(_ index: Int) -> Target {
        guard index != 0, let sources else {
            return Target(index: sources == nil ? nil : 0, url: url, headers: headers, ifRange: ifRange, entityTag: entityTag)
        }
        let source = sources.sources[index]
        return Target(index: index, url: source.url, headers: source.headers, ifRange: nil, entityTag: nil)
    }

    /// Whether the board or the caller stopped: every wait and loop of the worker ends.
    private var isStopped: Bool { board.stopReason != nil || control.stopRequest != .none }

    /// Takes segments and fetches them from `target` until there is nothing left (false) or the target
    /// was dropped (true: the worker may take another source). The decisions after each exchange are the
    /// ``SegmentAttemptMachine``'s; this loop performs them.
    private func run(_ target: Target, buffer: ReceiveBuffer, lowSpeed: inout LowSpeedWindow, sendAhead: inout SendAheadRule) -> Bool {
        var machine = SegmentAttemptMachine(rules: rules(for: target))
        while true {
            if isStopped { return false }
            if let index = target.index, let sources {
                guard sources.isLive(index) else { return true }
                if sources.phase(index) == .sampling {
                    let (event, failure) = sample(target, buffer: buffer)
                    switch perform(machine.handle(event), machine: &machine, target: target, failure: failure, lowSpeed: &lowSpeed) {
                    case .leaveSource: return true
                    case .finish: return false
                    default: continue
                    }
                }
            }
            guard let assignment = board.take(worker: id) else { return false }
            _ = machine.handle(.segmentTaken)
            var position = assignment.position
            defer { board.release(assignment.handle, worker: id) }
            segment: while board.remaining(assignment.handle, worker: id) > 0 {
                if isStopped { return false }
                let before = position
                // Pieces this worker completed and did not verify inline (a bad one, or one completed on a
                // failing path): settled before anything else, whatever ended the fetch.
                var due: [DuePiece] = []
                let end = fetch(
                    assignment.handle, from: &position, target: target, buffer: buffer, lowSpeed: &lowSpeed,
                    sendAhead: &sendAhead, due: &due)
                if !due.isEmpty {
                    switch settle(&due, target: target, buffer: buffer) {
                    case .again: break
                    case .leaveSource: return true
                    case .stop: return false
                    }
                }
                let (event, failure) = attempt(end, target: target, progress: position - before)
                switch perform(machine.handle(event), machine: &machine, target: target, failure: failure, lowSpeed: &lowSpeed) {
                case .proceed: continue
                case .nextSegment: break segment
                case .leaveSource: return true
                default: return false
                }
            }
        }
    }

    /// The machine's rules for `target`: the worker's retry rule, and whether it has other sources to fall back on.
    private func rules(for target: Target) -> SegmentAttemptMachine.Rules {
        SegmentAttemptMachine.Rules(
            retries: retryPolicy.retries, baseDelay: retryPolicy.baseDelay, maxDelay: retryPolicy.maxDelay,
            progressThatResets: RetryPolicy.progressThatResets, hasSources: target.index != nil, isMirror: target.isMirror)
    }

    /// The machine's event for an exchange that ended with `end` after moving `progress` bytes, and the
    /// failure it names (kept for the board or the source board).
    private func attempt(_ end: FetchEnd, target: Target, progress: Int64) -> (SegmentAttemptMachine.Event, DownloadError?) {
        let failure = end.failure(url: target.url)
        switch end {
        case .fetched: return (.fetched, nil)
        case .rangeEnded: return (.rangeEnded, nil)
        case .needsSample: return (.needsSample, nil)
        case .sourceDropped: return (.sourceDropped, nil)
        case .expired(let status): return (failed(isStopped ? .stopped : .expired(status: status), progress: progress), failure)
        case .restart: return (failed(isStopped ? .stopped : .restart, progress: progress), failure)
        case .failed: return (failed(classify(failure, target: target), progress: progress), failure)
        }
    }

    private func failed(_ failure: SegmentAttemptMachine.Failure, progress: Int64) -> SegmentAttemptMachine.Event {
        .failed(failure, progress: progress, jitter: Double.random(in: 0...1))
    }

    /// The machine's class of a failure the worker caught.
    private func classify(_ failure: DownloadError?, target: Target) -> SegmentAttemptMachine.Failure {
        guard let failure else { return .permanent }
        if isStopped || failure.code == .cancelled { return .stopped }
        if failure.restartReason != nil { return .restart }
        if failure.code == .tooSlow, failure.isTransient {
            let drops = target.index.map { sources?.dropsWhenSlow($0) ?? false } ?? false
            return .tooSlow(bytesPerSecond: Self.rate(in: failure.detail), dropsSource: drops)
        }
        return failure.isTransient ? .transient : .permanent
    }

    /// Performs the machine's effects — a wait, a drop on the source board, a stop of the board — feeding
    /// their answers back, until it names where the worker's loop goes: ``SegmentAttemptMachine/Action/proceed``,
    /// `nextSegment`, `leaveSource` or `finish`. `failure` is the attempt's, for the board and the drop reason.
    private func perform(
        _ first: SegmentAttemptMachine.Action, machine: inout SegmentAttemptMachine, target: Target, failure: DownloadError?,
        lowSpeed: inout LowSpeedWindow
    ) -> SegmentAttemptMachine.Action {
        var action = first
        while true {
            switch action {
            case .proceed, .nextSegment, .leaveSource, .finish:
                return action
            case .wait(let seconds):
                lowSpeed.reset()
                action = machine.handle(.waited(completed: interruptibleSleep(seconds, wakes: control.wakeUps, shouldStop: { isStopped })))
            case .dropSource(let cause):
                var wasLast = true
                if let index = target.index, let sources {
                    let reason: SourceDropReason
                    switch cause {
                    case .tooSlow(let rate): reason = .tooSlow(bytesPerSecond: rate)
                    case .unverifiable: reason = .unverifiable
                    case .failed: reason = .failed(failure ?? DownloadError(.internalError, "\(target.url): failed"))
                    }
                    wasLast = !sources.failed(index, reason)
                }
                action = machine.handle(.dropAnswered(wasLast: wasLast))
            case .stopBoard(let stop):
                let failure = failure ?? DownloadError(.internalError, "\(target.url): a segment failed")
                switch stop {
                case .restart: board.stop(.restart(failure.restartReason ?? .validatorChanged))
                case .refreshURL(let status): board.stop(.refreshURL(status: status))
                case .failed: board.stop(.failed(failure))
                case .everySourceDropped:
                    var last = failure
                    last.detail = "every source was dropped; the last, \(target.url): \(failure.detail)"
                    board.stop(.failed(last))
                }
                return .finish
            }
        }
    }

    /// The bytes per second a too-slow error names (its first number).
    private static func rate(in detail: String) -> Int {
        let digits = detail.drop { !$0.isNumber }.prefix { $0.isNumber }
        return Int(digits) ?? 0
    }

    /// Fetches a sample of ``SourceScheduler/sampleSize`` bytes from a mirror where the file already holds
    /// credited bytes, and compares (docs/MIRRORS.md). Waits for such bytes. Returns the machine's event:
    /// agreed, dropped (a disagreeing sample or answer), stopped (the download ended or stopped first),
    /// unverifiable (nothing written to compare with, and no agreeing source left to write it), or the
    /// failure of the exchange with the failure it names.
    private func sample(_ target: Target, buffer: ReceiveBuffer) -> (SegmentAttemptMachine.Event, DownloadError?) {
        guard let index = target.index, let sources else { return (.stopped, nil) }
        let size = min(SourceBoard.Scheduler.sampleSize, total)
        var range: Range<Int64>?
        while range == nil {
            if isStopped || board.isComplete { return (.stopped, nil) }
            if let run = board.creditedRuns().first(where: { $0.count >= size }) {
                range = run.lowerBound..<run.lowerBound + size
            } else if !sources.hasAgreeingSource(besides: index) {
                let failure = DownloadError(.serverIgnoredRange, "\(target.url): \(SourceDropReason.unverifiable)")
                return (failed(.unverifiable, progress: 0), failure)
            } else if !interruptibleSleep(0.05, wakes: control.wakeUps, shouldStop: { isStopped }) {
                return (.stopped, nil)
            }
        }
        guard let range else { return (.stopped, nil) }
        var served: [UInt8] = []
        served.reserveCapacity(Int(size))
        let written: [UInt8]
        do {
            guard try fetchExactly(range, from: target, buffer: buffer, what: "a sample", consume: { bytes, _ in served.append(contentsOf: bytes) })
            else { return (.sourceDropped, nil) }
            written = try file.read(count: Int(size), at: range.lowerBound)
        } catch {
            let failure = DownloadError.wrap(error)
            return (failed(classify(failure, target: target), progress: 0), failure)
        }
        if case .drop = sources.sampled(index, range: range, equal: written == served) { return (.sourceDropped, nil) }
        return (.sampleAgreed, nil)
    }

    /// One range request for exactly `range` from `target` (a mirror's sample, a piece fetched again), its
    /// body handed to `consume` with each run's offset: the answer is checked as a segment's is (a mirror
    /// that still needs a sample is not sent for one again), never past the range, and complete — else a
    /// transient error naming `what`. False when the source was dropped on its answer.
    private func fetchExactly(
        _ range: Range<Int64>, from target: Target, buffer: ReceiveBuffer, what: String,
        consume: (UnsafeRawBufferPointer, Int64) throws -> Void
    ) throws -> Bool {
        var cursor = range.lowerBound
        var dropped = false
        do {
            _ = try client.execute(
                request(for: range, target: target), cancellation: cancellation, buffer: buffer,
                onHead: { head in
                    switch validate(head, requested: range.lowerBound, target: target, sampling: true) {
                    case nil: return .stream
                    case .sourceDropped?:
                        dropped = true
                        throw EndOfExchange()
                    case let end?:
                        throw end.failure(url: target.url) ?? DownloadError(.contentRangeMismatch, "\(what): an unexpected answer", isTransient: true)
                    }
                },
                onBody: { bytes in
                    guard cursor + Int64(bytes.count) <= range.upperBound else {
                        throw DownloadError(.contentRangeMismatch, "\(what) ran past its range", isTransient: true)
                    }
                    try consume(bytes, cursor)
                    cursor += Int64(bytes.count)
                })
        } catch {
            if dropped { return false }
            throw error
        }
        guard cursor == range.upperBound else {
            throw DownloadError(
                .truncated, "\(what) of bytes \(range.lowerBound)-\(range.upperBound - 1) ended after \(cursor - range.lowerBound) bytes",
                isTransient: true)
        }
        return true
    }

    /// Range requests for the rest of the held segment, at most ``requestSize`` each, one after another
    /// on one connection. Where a round trip is a noticeable share of a request (``SendAheadRule``), the
    /// next is sent while the current response still owes at most ``sendAheadOwed`` bytes (HTTP/1.1
    /// pipelining), so the connection does not idle for a round trip between them. `position` is the
    /// segment's written end before and after; inside, the cursor always equals the offset of the
    /// response stream's next byte. Returns how the exchange ended.
    private func fetch(
        _ handle: SegmentHandle, from position: inout Int64, target: Target, buffer: ReceiveBuffer,
        lowSpeed: inout LowSpeedWindow, sendAhead: inout SendAheadRule, due: inout [DuePiece]
    ) -> FetchEnd {
        // Bounded requests keep the tail stealable: a sparing thief takes only what no request covers yet.
        guard let first = board.beginRequest(handle, worker: id, maximum: Self.requestSize),
            first.lowerBound == position
        else { return .fetched }
        // The ranges asked for and not yet answered, oldest first: the response being read is the first's.
        var asked = [first]
        var cursor = position
        var headAt = monotonicSeconds()
        var credited: Int64 = 0
        var window = lowSpeed
        var rule = sendAhead
        var completed: [Int] = []
        var decided: [DuePiece] = []
        let source = target.index ?? 0
        // Set by a callback that ends the exchange; read once the client has unwound.
        var ended: FetchEnd?
        func end(_ end: FetchEnd) -> EndOfExchange {
            ended = end
            return EndOfExchange()
        }
        defer {
            due += decided + completed.map { .unchecked($0) }
            position = cursor
            lowSpeed = window
            sendAhead = rule
            if let index = target.index, credited > 0 {
                sources?.served(index, bytes: credited, seconds: monotonicSeconds() - headAt)
            }
        }
        do {
            try client.execute(
                series: request(for: first, target: target), cancellation: cancellation, buffer: buffer,
                next: { owed in
                    // Asked with 0 after a response that nothing was sent behind: the next request goes now.
                    // A stopped board gives out no range.
                    if owed > 0, owed <= Self.sendAheadOwed {
                        rule.bodyProgress(at: monotonicSeconds(), bytes: Int64(asked[0].count) - owed)
                        rule.learned(shortestWait: sharedWait.fold(rule.shortestWait))
                    }
                    guard owed == 0 || (owed <= Self.sendAheadOwed && rule.sendsAhead), control.stopRequest == .none,
                        let range = board.continueRequest(handle, worker: id, maximum: Self.requestSize)
                    else { return nil }
                    asked.append(range)
                    return request(for: range, target: target)
                },
                onSent: { rule.sent(at: monotonicSeconds()) },
                onHead: { head in
                    rule.headArrived(at: monotonicSeconds())
                    rule.learned(shortestWait: sharedWait.fold(rule.shortestWait))
                    if let verdict = validate(head, requested: asked[0].lowerBound, target: target) { throw end(verdict) }
                    headAt = monotonicSeconds()
                    return .stream
                },
                onBody: { bytes in
                    // Claim, write, credit: the board never lets a steal cut below claimed bytes, and only what
                    // reached the file is credited.
                    let allowed = board.claim(handle, worker: id, at: cursor, count: bytes.count)
                    guard allowed > 0 else { throw end(.rangeEnded) }
                    var written = 0
                    do {
                        try file.write(UnsafeRawBufferPointer(rebasing: bytes[0..<allowed]), at: cursor, written: &written)
                    } catch {
                        credited += Int64(credit(handle, at: &cursor, count: written, source: source, completed: &completed))
                        throw error
                    }
                    // Fewer than received: the segment ends inside this buffer; the rest is not ours.
                    let counted = credit(handle, at: &cursor, count: allowed, source: source, completed: &completed)
                    credited += Int64(counted)
                    if let verdict = verify(&completed, decided: &decided, target: target) { throw end(verdict) }
                    if counted < allowed || allowed < bytes.count { throw end(.rangeEnded) }
                    if let rate = window.record(allowed, now: monotonicSeconds()) {
                        throw DownloadError(
                            .tooSlow,
                            "segment transfer too slow: \(Int(rate)) bytes/s for \(Int(lowSpeedTime)) s, below the limit of \(lowSpeedLimit) bytes/s",
                            isTransient: true)
                    }
                    if !TokenBucket.wait(rateLimiters, afterConsuming: allowed, wakes: control.wakeUps, shouldStop: { control.stopRequest != .none }) {
                        throw DownloadError(.cancelled, "stopped")
                    }
                },
                onEnd: { summary in
                    rule.responseEnded(at: monotonicSeconds(), bytes: summary.bodyBytes)
                    let range = asked.removeFirst()
                    // A response that ended before the bytes it promised (an empty 206, a short one) is a
                    // transient failure: retried within the worker's bound, never re-requested forever. A
                    // request sent ahead is dropped with the connection: its range starts past a gap.
                    if cursor < range.upperBound, board.remaining(handle, worker: id) > 0 {
                        throw DownloadError(
                            .truncated,
                            "a segment response for bytes \(range.lowerBound)-\(range.upperBound - 1) ended after \(cursor - range.lowerBound) bytes",
                            isTransient: true)
                    }
                })
        } catch {
            return ended ?? .failed(error)
        }
        return .fetched
    }

    /// The range request for `range` to `target`, with the validator that keeps every piece of one
    /// version (a mirror gets none: each of its answers is checked against the first source's instead).
    private func request(for range: Range<Int64>, target: Target) -> DKHTTPRequest {
        let headers = RangeRequest.headers(
            target.headers, asking: .closed(first: range.lowerBound, last: range.upperBound - 1), ifRange: target.ifRange)
        return DKHTTPRequest(method: .GET, url: target.url, headers: headers)
    }

    /// Credits `count` written bytes at the cursor and journals them (after the write: a journalled byte
    /// is always in the file). With piece checksums, the pieces this completed go to `completed`.
    @discardableResult
    private func credit(_ handle: SegmentHandle, at cursor: inout Int64, count: Int, source: Int, completed: inout [Int]) -> Int {
        let credited = board.record(handle, worker: id, at: cursor, count: count)
        cursor = credited.upperBound
        journal?.append(credited)
        wakes.credited(credited.count)
        if let pieces { completed += pieces.credit(credited, from: source) }
        return credited.count
    }

    /// Checks the pieces just completed, inline (``PieceBoard``: hashed from the file): a good one is verified,
    /// a bad one's refetch waits in `decided` until this response series ends (its sender only demoted, the
    /// series goes on). Returns how the exchange ends instead, if it does: a piece no source can give
    /// (or a failed hash read), or this worker's own source dropped by the decision.
    private func verify(_ completed: inout [Int], decided: inout [DuePiece], target: Target) -> FetchEnd? {
        guard let pieces else { return nil }
        while let piece = completed.first {
            let good: Bool
            do { good = try pieces.matches(piece) } catch { return .failed(error) }
            let next = decide(piece, good: good, pieces: pieces)
            completed.removeFirst()
            switch next {
            case .verified: break
            case .refetch(let index): decided.append(.refetch(piece, from: index))
            case .fail: return .failed(pieces.failure(piece))
            }
        }
        if let index = target.index, let sources, !sources.isLive(index) { return .sourceDropped }
        return nil
    }

    /// Applies the ``PieceVerifier``'s decision on a checked piece: demotes and drops its senders, journals
    /// a verified piece, stops the board when no source can give a good copy. Returns what comes next.
    private func decide(_ piece: Int, good: Bool, pieces: PieceBoard) -> PieceVerifier.Next {
        let decision = pieces.checked(piece, good: good, eligible: sources?.agreeing ?? [0])
        for index in decision.demote { sources?.demote(index) }
        for (index, count) in decision.drop.sorted(by: { $0.key < $1.key }) {
            _ = sources?.failed(index, .badPieces(count: count))
        }
        switch decision.next {
        case .verified: journal?.appendVerified(piece, fingerprint: pieces.fingerprint)
        case .fail: board.stop(.failed(pieces.failure(piece)))
        case .refetch: break
        }
        return decision.next
    }

    /// Where the worker goes after settling its pieces.
    private enum Settled {
        /// On with the same source.
        case again
        /// The source was dropped; others are left.
        case leaveSource
        /// The board stopped (or the caller did).
        case stop
    }

    /// Settles the pieces this worker completed: an unchecked one is hashed and decided; a bad one is
    /// fetched again from the source the verifier names and hashed again, until it is verified — or no
    /// source can give a good copy, and the download fails naming the piece.
    private func settle(_ due: inout [DuePiece], target: Target, buffer: ReceiveBuffer) -> Settled {
        guard let pieces else {
            due = []
            return .again
        }
        do {
            while let first = due.first {
                let piece: Int
                var next: PieceVerifier.Next
                switch first {
                case .unchecked(let index):
                    piece = index
                    next = decide(index, good: try pieces.matches(index), pieces: pieces)
                case .refetch(let index, let source):
                    piece = index
                    next = .refetch(from: source)
                }
                while case .refetch(let source) = next {
                    try refetch(piece, from: source, buffer: buffer)
                    next = decide(piece, good: try pieces.matches(piece), pieces: pieces)
                }
                if next == .fail { return .stop }
                due.removeFirst()
            }
        } catch {
            if !isStopped { board.stop(.failed(DownloadError.wrap(error))) }
            return .stop
        }
        if let index = target.index, let sources, !sources.isLive(index) { return .leaveSource }
        return .again
    }

    /// Writes `piece` again from source `index` (one range request, retried within the retry rule; past
    /// it the download fails with the source's error). Its bytes stay credited: they are only replaced.
    private func refetch(_ piece: Int, from index: Int, buffer: ReceiveBuffer) throws {
        guard let pieces else { return }
        let range = pieces.table.range(ofPiece: piece, total: total)
        let target = target(index)
        var retry = retryPolicy
        while true {
            if isStopped { throw DownloadError(.cancelled, "stopped") }
            var progress: Int64 = 0
            let served: Result<Bool, DownloadError>
            do {
                served = .success(
                    try fetchExactly(range, from: target, buffer: buffer, what: PieceChecksums.name(piece, range) + " fetched again") { bytes, offset in
                        var written = 0
                        defer { progress += Int64(written) }
                        try file.write(bytes, at: offset, written: &written)
                    })
            } catch {
                served = .failure(DownloadError.wrap(error))
            }
            switch served {
            case .success(true):
                return
            case .success(false):
                throw DownloadError(.serverIgnoredRange, "\(target.url): dropped while it sent \(PieceChecksums.name(piece, range)) again")
            case .failure(let failure):
                guard failure.code != .cancelled, case .retry(let delay, _) = retry.next(after: failure, progress: progress)
                else { throw failure }
                if !interruptibleSleep(delay, wakes: control.wakeUps, shouldStop: { isStopped }) {
                    throw DownloadError(.cancelled, "stopped")
                }
            }
        }
    }

    /// A 206 must cover exactly the asked start, carry the known total and the same validator; anything
    /// else is never written. A mirror's answer is first the ``SourceScheduler``'s to judge (agreement with
    /// the first source). Returns nil when the answer is written, else how the exchange ends; `sampling`:
    /// the answer is the sample itself, never sent for one.
    private func validate(_ head: ResponseHead, requested: Int64, target: Target, sampling: Bool = false) -> FetchEnd? {
        if target.isMirror, let index = target.index, let sources, !(300..<400).contains(head.status) {
            var total: Int64?
            if head.status == 206, let text = head.headers.first(name: "Content-Range"),
                case .satisfied(_, _, let length)? = try? ContentRange(parsing: text)
            {
                total = length
            } else if head.status == 200 {
                total = try? head.contentLength()
            }
            if head.status == 200 || head.status == 206 {
                switch sources.answered(index, status: head.status, total: total, lastModified: head.headers.first(name: "Last-Modified")) {
                case .agree: break
                case .needsSample: if !sampling { return .needsSample }
                case .drop: return .sourceDropped
                }
            }
        }
        let policy = RangeResponsePolicy(
            first: requested, knownEntityTag: target.entityTag, knownLastModified: nil, knownTotal: total)
        switch policy.decide(head) {
        case .write:
            return nil
        case .wholeBody(let reason), .restart(let reason):
            // A segment cannot take a whole body: start over (and probe again).
            return .restart(reason)
        case .complete:
            return .restart(.lengthChanged)
        case .retry(let detail):
            return .failed(DownloadError(.contentRangeMismatch, "a segment: \(detail)", httpStatus: head.status, isTransient: true))
        case .other:
            if SegmentAttemptMachine.expiredStatuses.contains(head.status) { return .expired(status: head.status) }
            return .failed(DownloadError.status(head.status, reason: head.reason, url: target.url))
        }
    }
}
