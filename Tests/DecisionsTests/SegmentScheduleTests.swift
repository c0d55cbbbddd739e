import Foundation
import Testing
import TestThreads

@testable import DownloadKitDecisions

/// Deterministic schedule exploration of the segment board (issue #22). No threads, no sleeps: the test
/// owns the schedule. Simulated workers follow the production worker's protocol step by step —
/// take → beginRequest (→ continueRequest, sent ahead) → claim → write → record → (drop, release) — against an in-memory file, while
/// the schedule interleaves steals (a take by an idle worker), network drops, pauses (snapshot, then a
/// board rebuilt from it), stops and restarts (the file truncated, a new generation). After every step:
/// every credited byte was written by a response for that offset of the current version, no byte is
/// credited twice, a credited byte is never overwritten with other bytes, and a pause's snapshot claims
/// only bytes in the file. At the end every byte of `[0, total)` is credited exactly once and the
/// board's coverage proof agrees. The same exploration over a model of the old position-based board
/// finds the #22 corruption.
@Suite struct SegmentScheduleTests {

    @Test func theBoardNeverLosesNorDoubleCreditsAByteOverTensOfThousandsOfSchedules() async throws {
        let (failure, steps) = await onOwnThread { () -> (String?, Int) in
            var random = SplitMix(seed: 0x5EED_0022)
            var steps = 0
            for schedule in 0..<20_000 {
                let parameters = ScheduleParameters(&random)
                var world = World<HandleBoard>(parameters)
                if let failure = world.explore(&random) {
                    return ("schedule \(schedule) \(parameters): \(failure)\n\(world.trace.suffix(12).joined(separator: "\n"))", steps)
                }
                steps += world.steps
            }
            return (nil, steps)
        }
        if let failure {
            Issue.record("\(failure)")
            return
        }
        #expect(steps > 1_000_000, "the exploration ran \(steps) steps")
    }

    @Test func theOldPositionBasedBoardFailsTheSameExploration() async throws {
        let found = await onOwnThread { () -> String? in
            var random = SplitMix(seed: 0x5EED_0022)
            for _ in 0..<20_000 {
                let parameters = ScheduleParameters(&random)
                var world = World<LegacyPositionBoard>(parameters)
                if let failure = world.explore(&random) { return failure }
            }
            return nil
        }
        let failure = try #require(found, "the exploration must catch the position-lookup corruption of issue #22")
        #expect(failure.contains("credited") || failure.contains("overwritten") || failure.contains("coverage"))
    }
}

// MARK: - The exploration

/// A small deterministic PRNG (SplitMix64), so every schedule can be replayed from its seed.
struct SplitMix {
    var state: UInt64
    init(seed: UInt64) { state = seed }
    mutating func next() -> UInt64 {
        state &+= 0x9E37_79B9_7F4A_7C15
        var z = state
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        return z ^ (z >> 31)
    }
    mutating func below(_ bound: Int) -> Int { Int(next() % UInt64(bound)) }
    mutating func chance(_ percent: Int) -> Bool { below(100) < percent }
}

struct ScheduleParameters: CustomStringConvertible {
    let alignment: Int64 = 8
    let total: Int64
    let workers: Int
    let requestSize: Int64
    let maxBuffer: Int
    let randomSteps: Int

    init(_ random: inout SplitMix) {
        total = Int64(3 + random.below(4)) * 16 + Int64(random.below(8))
        workers = 2 + random.below(3)
        requestSize = Int64(8 + random.below(40))
        maxBuffer = 1 + random.below(24)
        randomSteps = 40 + random.below(120)
    }

    var description: String {
        "total \(total), \(workers) workers, requests ≤ \(requestSize), buffers ≤ \(maxBuffer), \(randomSteps) random steps"
    }
}

/// What the simulated workers need from a board; implemented by the real rules and by a model of the
/// old position-based board.
protocol ScheduledBoard {
    associatedtype Handle
    /// The old worker went on after a short credit as long as it had written the whole buffer.
    static var continuesAfterAShortCredit: Bool { get }
    init(plans: [SegmentPlan], minimum: Int64, alignment: Int64)
    mutating func take(worker: Int) -> (handle: Handle, position: Int64)?
    mutating func beginRequest(_ handle: Handle, worker: Int, at position: Int64, maximum: Int64) -> Range<Int64>?
    /// The next request sent ahead on the same connection, or nil (the old board never pipelined).
    mutating func continueRequest(_ handle: Handle, worker: Int, maximum: Int64) -> Range<Int64>?
    mutating func claim(_ handle: Handle, worker: Int, at position: Int64, count: Int) -> Int
    mutating func record(_ handle: Handle, worker: Int, at position: Int64, count: Int) -> Range<Int64>
    func remaining(_ handle: Handle, worker: Int, at position: Int64) -> Int64
    mutating func release(_ handle: Handle, worker: Int)
    mutating func stop()
    func snapshot() -> [SegmentPlan]
    func provesCoverage(total: Int64) -> Bool
}

/// The exploration's boards never fail: a stop is a pause or a restart.
enum ScheduleStop: Error {}

/// A snapshot's segment read back as a saved map (its end always known).
struct SavedPlan: SavedSegment {
    let start: Int64
    let end: Int64?
    let written: Int64
    init(_ plan: SegmentPlan) { (start, end, written) = (plan.start, plan.end, plan.written) }
}

struct HandleBoard: ScheduledBoard {
    static var continuesAfterAShortCredit: Bool { false }
    var state: SegmentBoardState<ScheduleStop>
    init(plans: [SegmentPlan], minimum: Int64, alignment: Int64) {
        state = SegmentBoardState(plans: plans, minimumSegmentSize: minimum, alignment: alignment)
    }
    mutating func take(worker: Int) -> (handle: SegmentHandle, position: Int64)? {
        state.take(worker: worker).map { ($0.handle, $0.position) }
    }
    mutating func beginRequest(_ handle: SegmentHandle, worker: Int, at position: Int64, maximum: Int64) -> Range<Int64>? {
        state.beginRequest(handle, worker: worker, maximum: maximum)
    }
    mutating func continueRequest(_ handle: SegmentHandle, worker: Int, maximum: Int64) -> Range<Int64>? {
        state.continueRequest(handle, worker: worker, maximum: maximum)
    }
    mutating func claim(_ handle: SegmentHandle, worker: Int, at position: Int64, count: Int) -> Int {
        state.claim(handle, worker: worker, at: position, count: count)
    }
    mutating func record(_ handle: SegmentHandle, worker: Int, at position: Int64, count: Int) -> Range<Int64> {
        state.record(handle, worker: worker, at: position, count: count).credited
    }
    func remaining(_ handle: SegmentHandle, worker: Int, at position: Int64) -> Int64 {
        state.remaining(handle, worker: worker)
    }
    mutating func release(_ handle: SegmentHandle, worker: Int) { state.release(handle, worker: worker) }
    mutating func stop() { state.stop(.stopped) }
    func snapshot() -> [SegmentPlan] { state.snapshot() }
    func provesCoverage(total: Int64) -> Bool { state.coverageGap(total: total) == nil }
}

/// The board before issue #22's fix, kept as a test model: segments are found by byte position
/// (`lastIndex(where: start <= position)`), `limit(at:)` and `record(position:count:)` are separate
/// steps, and a steal that spares no request cuts at the owner's position.
struct LegacyPositionBoard: ScheduledBoard {
    static var continuesAfterAShortCredit: Bool { true }
    struct Segment {
        var start: Int64, end: Int64, written: Int64
        var owner: Int?
        var requestedEnd: Int64 = 0
        var position: Int64 { start + written }
        var remaining: Int64 { end - position }
    }
    var segments: [Segment]
    let minimum: Int64
    let alignment: Int64

    init(plans: [SegmentPlan], minimum: Int64, alignment: Int64) {
        segments = plans.map { Segment(start: $0.start, end: $0.end, written: $0.written, owner: nil) }
        self.minimum = max(alignment, minimum)
        self.alignment = alignment
    }

    func splitPoint(_ segment: Segment, sparing: Bool) -> Int64? {
        let from = sparing ? max(segment.position, segment.requestedEnd) : segment.position
        var middle = from + (segment.end - from) / 2
        middle = (middle + alignment - 1) / alignment * alignment
        guard middle > from, segment.end - middle >= minimum else { return nil }
        return middle
    }

    mutating func take(worker: Int) -> (handle: Int64, position: Int64)? {
        if let index = segments.indices.first(where: { segments[$0].owner == nil && segments[$0].remaining > 0 }) {
            segments[index].owner = worker
            return (segments[index].position, segments[index].position)
        }
        func candidates(_ sparing: Bool) -> [(Int, Int64)] {
            segments.indices.compactMap { index in
                guard segments[index].owner != nil, let middle = splitPoint(segments[index], sparing: sparing) else { return nil }
                return (index, middle)
            }
        }
        var choices = candidates(true)
        if choices.isEmpty { choices = candidates(false) }
        guard let (victim, middle) = choices.max(by: { segments[$0.0].end - $0.1 < segments[$1.0].end - $1.1 }) else { return nil }
        let oldEnd = segments[victim].end
        segments[victim].end = middle
        segments.insert(Segment(start: middle, end: oldEnd, written: 0, owner: worker, requestedEnd: middle), at: victim + 1)
        return (middle, middle)
    }
    mutating func beginRequest(_ handle: Int64, worker: Int, at position: Int64, maximum: Int64) -> Range<Int64>? {
        guard let index = segments.lastIndex(where: { $0.start <= position }), segments[index].position == position else {
            return nil
        }
        let end = min(segments[index].end, position + maximum)
        segments[index].requestedEnd = end
        return end > position ? position..<end : nil
    }
    mutating func continueRequest(_ handle: Int64, worker: Int, maximum: Int64) -> Range<Int64>? { nil }
    func limit(at position: Int64) -> Int64 {
        guard let index = segments.lastIndex(where: { $0.start <= position }) else { return 0 }
        return segments[index].position == position ? segments[index].remaining : 0
    }
    mutating func claim(_ handle: Int64, worker: Int, at position: Int64, count: Int) -> Int {
        Int(min(Int64(count), limit(at: position)))
    }
    mutating func record(_ handle: Int64, worker: Int, at position: Int64, count: Int) -> Range<Int64> {
        guard let index = segments.lastIndex(where: { $0.start <= position }), segments[index].position == position else {
            return position..<position
        }
        let accepted = max(0, min(Int64(count), segments[index].end - position))
        segments[index].written += accepted
        return position..<position + accepted
    }
    func remaining(_ handle: Int64, worker: Int, at position: Int64) -> Int64 { limit(at: position) }
    mutating func release(_ handle: Int64, worker: Int) {
        if let index = segments.lastIndex(where: { $0.start <= handle }), segments[index].owner == worker {
            segments[index].owner = nil
        }
    }
    mutating func stop() {}
    func snapshot() -> [SegmentPlan] { segments.map { SegmentPlan(start: $0.start, end: $0.end, written: $0.written) } }
    func provesCoverage(total: Int64) -> Bool { segments.allSatisfy { $0.remaining == 0 } }
}

/// The simulated download: a board, workers following the production protocol, an in-memory file whose
/// every byte records which version and which response offset wrote it, and the credit ledger.
struct World<Board: ScheduledBoard> {
    struct Worker {
        var handle: Board.Handle?
        var finished = false
        /// The worker's cursor: the segment position it believes in.
        var position: Int64 = 0
        var request: Range<Int64>?
        /// A request sent ahead on the same connection (pipelined): its response follows `request`'s.
        var queued: Range<Int64>?
        /// Offset of the response stream's next byte.
        var stream: Int64 = 0
        var pending: (allowed: Int, count: Int, written: Int?)?

        /// The connection is gone, with the response being read and any request sent ahead.
        mutating func dropConnection() {
            request = nil
            queued = nil
        }
    }

    let parameters: ScheduleParameters
    var board: Board
    var workers: [Worker]
    var version = 1
    /// `version << 32 | offset` of the response byte written there, or -1.
    var file: [Int64]
    var credits: [Int]
    var stopping: Bool?
    var steps = 0
    var trace: [String] = []

    init(_ parameters: ScheduleParameters) {
        self.parameters = parameters
        board = Board(plans: Self.freshPlan(parameters), minimum: parameters.alignment, alignment: parameters.alignment)
        workers = Array(repeating: Worker(), count: parameters.workers)
        file = Array(repeating: -1, count: Int(parameters.total))
        credits = Array(repeating: 0, count: Int(parameters.total))
    }

    static func freshPlan(_ parameters: ScheduleParameters) -> [SegmentPlan] {
        SegmentPlan.split(from: 0, total: parameters.total, count: parameters.workers, minimumSegmentSize: 16)
    }

    func cell(_ offset: Int64) -> Int64 { Int64(version) << 32 | offset }

    /// Runs `randomSteps` random steps (with stops, restarts, pauses and drops), then finishes the download
    /// with random interleavings of the normal steps only. Returns the first violation.
    mutating func explore(_ random: inout SplitMix) -> String? {
        for _ in 0..<parameters.randomSteps {
            if let failure = step(&random, disruptive: true) { return failure }
        }
        var guardSteps = 0
        while true {
            guardSteps += 1
            if guardSteps > 20_000 { return "no progress: the schedule did not finish" }
            let before = steps
            if let failure = step(&random, disruptive: false) { return failure }
            if steps == before { break }
        }
        for offset in 0..<Int(parameters.total) {
            if credits[offset] != 1 { return "coverage: byte \(offset) credited \(credits[offset]) times at the end" }
            if file[offset] != cell(Int64(offset)) { return "coverage: byte \(offset) of the file is wrong at the end" }
        }
        if !board.provesCoverage(total: parameters.total) { return "coverage: the board does not prove full coverage" }
        return nil
    }

    /// One step chosen at random among the enabled ones; no step taken when none is enabled.
    mutating func step(_ random: inout SplitMix, disruptive: Bool) -> String? {
        var enabled: [Int] = []
        for index in workers.indices where canAct(index) { enabled.append(index) }
        if let stopping, enabled.isEmpty {
            steps += 1
            return finishStop(restart: stopping)
        }
        if disruptive && stopping == nil {
            let roll = random.below(100)
            if roll < 2 { return pause() }
            if roll < 4 { return beginStop(restart: false) }
            if roll == 4 { return beginStop(restart: true) }
        }
        guard !enabled.isEmpty else { return nil }
        steps += 1
        let index = enabled[random.below(enabled.count)]
        return act(index, &random, disruptive: disruptive)
    }

    func canAct(_ index: Int) -> Bool {
        let worker = workers[index]
        if stopping != nil { return worker.pending != nil || worker.handle != nil }
        return !worker.finished
    }

    mutating func act(_ index: Int, _ random: inout SplitMix, disruptive: Bool) -> String? {
        var worker = workers[index]
        defer { workers[index] = worker }
        guard let handle = worker.handle else {
            if let (handle, position) = board.take(worker: index) {
                worker.handle = handle
                worker.position = position
                trace.append("w\(index) take at \(position)")
            } else {
                worker.finished = true
                trace.append("w\(index) finished")
            }
            return nil
        }
        if let pending = worker.pending {
            if pending.written == nil {
                // pwrite: a short write now and then (a disk error), else everything claimed.
                let count = disruptive && random.chance(3) ? random.below(pending.allowed + 1) : pending.allowed
                for k in 0..<count {
                    let offset = Int(worker.position) + k
                    let bytes = cell(worker.stream + Int64(k))
                    if credits[offset] > 0 && file[offset] != bytes {
                        return "credited byte \(offset) overwritten by the response byte for \(worker.stream + Int64(k))"
                    }
                    file[offset] = bytes
                }
                worker.pending?.written = count
                trace.append("w\(index) wrote \(count) at \(worker.position) (stream \(worker.stream))")
                return nil
            }
            let written = pending.written!
            let credited = board.record(handle, worker: index, at: worker.position, count: written)
            trace.append("w\(index) recorded \(credited)")
            for offset in credited {
                credits[Int(offset)] += 1
                if credits[Int(offset)] > 1 { return "byte \(offset) credited twice" }
                if file[Int(offset)] != cell(offset) {
                    return "byte \(offset) credited but written by the response byte for \(file[Int(offset)] & 0xFFFF_FFFF) of version \(file[Int(offset)] >> 32)"
                }
            }
            worker.pending = nil
            worker.position = credited.upperBound
            worker.stream += Int64(pending.count)
            if written < pending.allowed {
                worker.dropConnection()  // the write failed: the response is dropped, the segment retried
            } else if (credited.count < pending.allowed && !Board.continuesAfterAShortCredit) || pending.allowed < pending.count {
                worker.dropConnection()  // SegmentEnded: drop the response and give the segment back
                board.release(handle, worker: index)
                worker.handle = nil
            } else if worker.stream == worker.request?.upperBound {
                // The response ended: the one to the request sent ahead (if any) follows on the connection.
                worker.request = worker.queued
                worker.queued = nil
                if let next = worker.request { worker.stream = next.lowerBound }
            }
            return nil
        }
        if stopping != nil {
            board.release(handle, worker: index)
            worker.handle = nil
            worker.dropConnection()
            return nil
        }
        guard let request = worker.request else {
            guard board.remaining(handle, worker: index, at: worker.position) > 0,
                let range = board.beginRequest(handle, worker: index, at: worker.position, maximum: parameters.requestSize),
                range.lowerBound == worker.position
            else {
                board.release(handle, worker: index)
                worker.handle = nil
                trace.append("w\(index) released")
                return nil
            }
            worker.request = range
            worker.stream = range.lowerBound
            trace.append("w\(index) requests \(range)")
            return nil
        }
        // Send the next request ahead (HTTP/1.1 pipelining), as the production worker does near a response's end.
        if worker.queued == nil && random.chance(15),
            let next = board.continueRequest(handle, worker: index, maximum: parameters.requestSize)
        {
            worker.queued = next
            trace.append("w\(index) sends ahead \(next)")
            return nil
        }
        if disruptive && random.chance(4) {
            worker.dropConnection()  // the connection drops; the worker retries from its position
            trace.append("w\(index) connection dropped")
            return nil
        }
        let count = 1 + random.below(min(parameters.maxBuffer, Int(request.upperBound - worker.stream)))
        let allowed = board.claim(handle, worker: index, at: worker.position, count: count)
        trace.append("w\(index) claims \(count) at \(worker.position): \(allowed)")
        if allowed == 0 {
            worker.dropConnection()
            board.release(handle, worker: index)
            worker.handle = nil
            return nil
        }
        worker.pending = (allowed, count, nil)
        return nil
    }

    /// A pause's checkpoint: the snapshot claims only bytes that are in the file, of this version.
    mutating func pause() -> String? {
        trace.append("pause snapshot")
        for segment in board.snapshot() {
            for offset in segment.start..<segment.start + segment.written where file[Int(offset)] != cell(offset) {
                return "the pause snapshot claims byte \(offset), which is not in the file"
            }
        }
        return nil
    }

    mutating func beginStop(restart: Bool) -> String? {
        trace.append(restart ? "restart: stop" : "stop")
        board.stop()
        stopping = restart
        for index in workers.indices { workers[index].dropConnection() }
        return nil
    }

    /// Every worker has left: resume from the snapshot (pause), or truncate and start a new version.
    mutating func finishStop(restart: Bool) -> String? {
        stopping = nil
        if let failure = pause() { return failure }
        if restart {
            version += 1
            file = Array(repeating: -1, count: Int(parameters.total))
            credits = Array(repeating: 0, count: Int(parameters.total))
            board = Board(plans: Self.freshPlan(parameters), minimum: parameters.alignment, alignment: parameters.alignment)
        } else {
            guard let plans = SegmentPlan.recover(
                saved: board.snapshot().map(SavedPlan.init), fileSize: parameters.total, total: parameters.total)
            else { return "the snapshot is not a usable map" }
            board = Board(plans: plans, minimum: parameters.alignment, alignment: parameters.alignment)
        }
        for index in workers.indices { workers[index] = Worker() }
        trace.append(restart ? "restarted" : "resumed")
        // After a restart no byte of the old version may survive as credited.
        for offset in 0..<Int(parameters.total) where credits[offset] > 0 && file[offset] != cell(Int64(offset)) {
            return "byte \(offset) of an old version survives"
        }
        return nil
    }
}
