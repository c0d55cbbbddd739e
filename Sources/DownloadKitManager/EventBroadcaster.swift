import DownloadKit
import HTTPClient

/// Fans manager events out to any number of subscribers through the one ``EventFanout`` rule: a slow
/// subscriber loses only progress (a task's newer progress replaces its waiting one, and the oldest
/// progress goes when more than `bufferSize` events wait), never a state change, `finished`, `failed`,
/// `removed` or `allFinished`.
final class EventBroadcaster: Sendable {
    private let fanout: EventFanout<ManagerEvent>

    init(bufferSize: Int) {
        fanout = EventFanout(
            capacity: bufferSize, keepsBacklog: false,
            isDroppable: { event in
                if case .progress = event { return true }
                return false
            },
            canReplace: { queued, new in
                if case .progress(let queuedID, _) = queued, case .progress(let newID, _) = new { return queuedID == newID }
                return false
            })
    }

    /// A new subscription that receives every later event.
    func subscribe() -> EventSequence<ManagerEvent> {
        EventSequence(fanout)
    }

    func yield(_ event: ManagerEvent) {
        fanout.yield(event)
    }

    /// Ends every subscription (the manager closed).
    func finish() {
        fanout.finish(with: nil)
    }
}
