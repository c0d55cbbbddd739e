import Testing

@testable import DownloadKitDecisions

/// The segment worker's decisions after each exchange, as events in and actions out: every path a failed
/// attempt can take (stop, restart, fresh URL, drop, retry, give up), the retry count, and the answers
/// the worker feeds back.
@Suite("SegmentAttemptMachine")
struct SegmentAttemptMachineTests {
    typealias Machine = SegmentAttemptMachine

    /// Where the worker's requests go.
    enum Where: String, CaseIterable, Sendable {
        /// No mirrors: the URL is the only source.
        case only
        /// The first source of several.
        case first
        /// A mirror.
        case mirror

        var rules: Machine.Rules {
            Machine.Rules(
                retries: 2, baseDelay: 1, maxDelay: 30, progressThatResets: 64 << 10, hasSources: self != .only,
                isMirror: self == .mirror)
        }
    }

    static func machine(_ place: Where) -> Machine { Machine(rules: place.rules) }

    static func failed(_ failure: Machine.Failure, progress: Int64 = 0, jitter: Double = 0) -> Machine.Event {
        .failed(failure, progress: progress, jitter: jitter)
    }

    struct FailureCase: Sendable, CustomTestStringConvertible {
        let failure: Machine.Failure
        let place: Where
        let action: Machine.Action
        let state: Machine.State
        var testDescription: String { "\(failure) on \(place.rawValue) → \(action)" }
    }

    static let ended = Machine.State.ended(leftSource: false)

    /// The first failure of a run of attempts, wherever the worker's requests go.
    static let failures: [FailureCase] = [
        FailureCase(failure: .stopped, place: .only, action: .finish, state: ended),
        FailureCase(failure: .stopped, place: .mirror, action: .finish, state: ended),
        FailureCase(failure: .restart, place: .only, action: .stopBoard(.restart), state: ended),
        FailureCase(failure: .restart, place: .first, action: .stopBoard(.restart), state: ended),
        FailureCase(failure: .restart, place: .mirror, action: .dropSource(.failed), state: .dropping),
        FailureCase(failure: .expired(status: 404), place: .only, action: .stopBoard(.refreshURL(status: 404)), state: ended),
        FailureCase(failure: .expired(status: 403), place: .first, action: .dropSource(.failed), state: .dropping),
        FailureCase(failure: .expired(status: 410), place: .mirror, action: .dropSource(.failed), state: .dropping),
        FailureCase(
            failure: .tooSlow(bytesPerSecond: 900, dropsSource: true), place: .mirror,
            action: .dropSource(.tooSlow(bytesPerSecond: 900)), state: .dropping),
        FailureCase(
            failure: .tooSlow(bytesPerSecond: 900, dropsSource: false), place: .mirror, action: .wait(seconds: 0.5),
            state: .waiting(failures: 1)),
        FailureCase(
            failure: .tooSlow(bytesPerSecond: 900, dropsSource: true), place: .only, action: .wait(seconds: 0.5),
            state: .waiting(failures: 1)),
        FailureCase(failure: .unverifiable, place: .mirror, action: .dropSource(.unverifiable), state: .dropping),
        FailureCase(failure: .unverifiable, place: .only, action: .stopBoard(.failed), state: ended),
        FailureCase(failure: .transient, place: .only, action: .wait(seconds: 0.5), state: .waiting(failures: 1)),
        FailureCase(failure: .transient, place: .mirror, action: .wait(seconds: 0.5), state: .waiting(failures: 1)),
        FailureCase(failure: .permanent, place: .only, action: .stopBoard(.failed), state: ended),
        FailureCase(failure: .permanent, place: .first, action: .dropSource(.failed), state: .dropping),
        FailureCase(failure: .permanent, place: .mirror, action: .dropSource(.failed), state: .dropping),
    ]

    @Test(arguments: failures)
    func aFailureDecidesOnePath(_ row: FailureCase) {
        var machine = Self.machine(row.place)
        #expect(machine.handle(.segmentTaken) == .proceed)
        #expect(machine.handle(Self.failed(row.failure)) == row.action)
        #expect(machine.state == row.state)
    }

    /// Events that end no attempt: where the worker's loop goes.
    @Test(arguments: [
        (Machine.Event.fetched, Machine.Action.proceed, Machine.State.running(failures: 0)),
        (.rangeEnded, .nextSegment, .running(failures: 0)),
        (.needsSample, .nextSegment, .running(failures: 0)),
        (.sourceDropped, .leaveSource, .ended(leftSource: true)),
        (.stopped, .finish, .ended(leftSource: false)),
        (.sampleAgreed, .proceed, .running(failures: 0)),
    ])
    func anExchangeThatDidNotFail(_ event: Machine.Event, _ action: Machine.Action, _ state: Machine.State) {
        var machine = Self.machine(.mirror)
        #expect(machine.handle(event) == action)
        #expect(machine.state == state)
    }

    /// The retry wait's answer: completed, the worker goes on; cut short by a stop, it ends.
    @Test(arguments: [(true, Machine.Action.proceed), (false, .finish)])
    func theWaitEnds(_ completed: Bool, _ action: Machine.Action) {
        var machine = Self.machine(.only)
        #expect(machine.handle(Self.failed(.transient)) == .wait(seconds: 0.5))
        #expect(machine.handle(.waited(completed: completed)) == action)
        #expect(machine.state == (completed ? .running(failures: 1) : .ended(leftSource: false)))
    }

    /// The source board's answer to a drop: others left, the worker leaves this source; the last, the
    /// download fails.
    @Test(arguments: [(false, Machine.Action.leaveSource), (true, .stopBoard(.everySourceDropped))])
    func theDropIsAnswered(_ wasLast: Bool, _ action: Machine.Action) {
        var machine = Self.machine(.mirror)
        #expect(machine.handle(Self.failed(.permanent)) == .dropSource(.failed))
        #expect(machine.handle(.dropAnswered(wasLast: wasLast)) == action)
        #expect(machine.state == .ended(leftSource: !wasLast))
    }

    /// `retries` transient failures in a row without progress are waited out; the next one gives up:
    /// the download fails without mirrors, the source is dropped with them.
    @Test(arguments: [(Where.only, Machine.Action.stopBoard(.failed)), (.mirror, .dropSource(.failed))])
    func transientFailuresPastTheRuleGiveUp(_ place: Where, _ last: Machine.Action) {
        var machine = Self.machine(place)
        #expect(machine.handle(Self.failed(.transient, jitter: 1)) == .wait(seconds: 1))
        #expect(machine.handle(.waited(completed: true)) == .proceed)
        #expect(machine.handle(Self.failed(.transient, jitter: 1)) == .wait(seconds: 2))
        #expect(machine.handle(.waited(completed: true)) == .proceed)
        #expect(machine.handle(Self.failed(.transient, jitter: 1)) == last)
    }

    /// What starts the count again: an attempt that moved 64 KiB, a new segment, an agreeing sample — and
    /// what does not: less progress, a finished exchange.
    @Test(arguments: [
        ([Machine.Event](), Int64(64 << 10), true),
        ([], Int64(64 << 10) - 1, false),
        ([.segmentTaken], 0, true),
        ([.sampleAgreed], 0, true),
        ([.fetched, .rangeEnded], 0, false),
    ])
    func theCountStartsAgain(_ between: [Machine.Event], _ progress: Int64, _ retried: Bool) {
        var machine = Self.machine(.only)
        for _ in 0..<2 {
            _ = machine.handle(Self.failed(.transient))
            _ = machine.handle(.waited(completed: true))
        }
        for event in between { _ = machine.handle(event) }
        let action = machine.handle(Self.failed(.transient, progress: progress))
        #expect(action == (retried ? .wait(seconds: 0.5) : .stopBoard(.failed)))
    }

    /// Once done with its source, every further event repeats where the worker went.
    @Test(arguments: [(Machine.Event.sourceDropped, Machine.Action.leaveSource), (.stopped, .finish)])
    func anEndedMachineStaysEnded(_ ending: Machine.Event, _ action: Machine.Action) {
        var machine = Self.machine(.mirror)
        _ = machine.handle(ending)
        for event: Machine.Event in [.segmentTaken, .fetched, Self.failed(.transient), .waited(completed: true), .stopped] {
            #expect(machine.handle(event) == action)
        }
    }

    /// Exponential backoff with equal jitter: half to all of `base · 2^(attempt-1)`, capped at `maximum`,
    /// with the jitter clamped to `0...1`.
    @Test(arguments: [
        (1, 1.0, 30.0, 0.0, 0.5), (1, 1.0, 30.0, 1.0, 1.0), (3, 1.0, 30.0, 0.5, 3.0), (6, 1.0, 30.0, 1.0, 30.0),
        (200, 1.0, 30.0, 0.0, 15.0), (2, 0.25, 30.0, 2.0, 0.5), (2, 0.25, 30.0, -1.0, 0.25),
    ])
    func backoff(_ attempt: Int, _ base: Double, _ maximum: Double, _ jitter: Double, _ delay: Double) {
        #expect(RetryPolicy.backoffDelay(attempt: attempt, base: base, maximum: maximum, jitter: jitter) == delay)
    }
}
