@testable import DownloadKit
import Testing

/// The one slow-consumer rule (EventFanout): drop only what is droppable, never reorder, never lose a
/// state change or the end.
@Suite struct EventFanoutTests {
    enum Event: Sendable, Hashable {
        case state(Int)
        case progress(task: Int, value: Int)
        case end
    }

    func makeFanout(capacity: Int, backlog: Bool = false) -> EventFanout<Event> {
        EventFanout(
            capacity: capacity, keepsBacklog: backlog,
            isDroppable: { if case .progress = $0 { return true } else { return false } },
            canReplace: { queued, new in
                if case .progress(let a, _) = queued, case .progress(let b, _) = new { return a == b }
                return false
            })
    }

    func drain(_ sequence: EventSequence<Event>) async -> [Event] {
        var all: [Event] = []
        for await event in sequence { all.append(event) }
        return all
    }

    @Test func aSubscriberThatNeverReadsKeepsEveryStateChangeInOrder() async {
        let fanout = makeFanout(capacity: 8)
        let idle = EventSequence(fanout)
        for round in 0..<200 {
            fanout.yield(.state(round))
            for value in 0..<50 { fanout.yield(.progress(task: value % 3, value: value)) }
        }
        fanout.finish(with: .end)
        let events = await drain(idle)
        #expect(events.compactMap { if case .state(let n) = $0 { n } else { nil } } == Array(0..<200))
        #expect(events.last == .end)
        // Progress was shed: far fewer than the 10,000 sent.
        #expect(events.filter { if case .progress = $0 { true } else { false } }.count < 1000)
    }

    @Test func belowCapacityEverythingIsKeptAtCapacityProgressYields() async {
        let roomy = makeFanout(capacity: 100)
        let all = EventSequence(roomy)
        let sent: [Event] = [.progress(task: 1, value: 1), .progress(task: 1, value: 2), .progress(task: 2, value: 1), .state(7), .progress(task: 2, value: 2)]
        for event in sent { roomy.yield(event) }
        roomy.finish(with: nil)
        #expect(await drain(all) == sent)

        let tight = makeFanout(capacity: 2)
        let some = EventSequence(tight)
        tight.yield(.progress(task: 1, value: 1))
        tight.yield(.progress(task: 1, value: 2))  // [p11 p12]
        tight.yield(.progress(task: 1, value: 3))  // at capacity, supersedes p12: [p11 p13]
        tight.yield(.progress(task: 2, value: 1))  // another task: appended, oldest progress dropped: [p13 p21]
        tight.yield(.state(7))                     // kept; oldest progress dropped: [p21 s7]
        tight.yield(.state(8))                     // kept; [s7 s8] after dropping p21
        tight.yield(.state(9))                     // over capacity with nothing droppable: kept
        tight.finish(with: nil)
        #expect(await drain(some) == [.state(7), .state(8), .state(9)])
    }

    @Test func lateSubscribersSeeTheEndAndBacklogGoesToTheFirstOnly() async {
        let fanout = makeFanout(capacity: 10, backlog: true)
        fanout.yield(.state(1))
        let first = EventSequence(fanout)
        fanout.yield(.state(2))
        let second = EventSequence(fanout)
        fanout.finish(with: .end)
        #expect(await drain(first) == [.state(1), .state(2), .end])
        #expect(await drain(second) == [.end])
        #expect(await drain(EventSequence(fanout)) == [.end])
    }

    @Test func aCancelledIteratorEndsAndTheOthersGoOn() async {
        let fanout = makeFanout(capacity: 10)
        let waiting = EventSequence(fanout)
        let other = EventSequence(fanout)
        let task = Task { await drain(waiting) }
        task.cancel()
        _ = await task.value
        fanout.yield(.state(3))
        fanout.finish(with: .end)
        #expect(await drain(other) == [.state(3), .end])
    }
}
