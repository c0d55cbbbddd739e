import HTTPClient

/// Fans manager events out to any number of `AsyncStream` subscribers.
final class EventBroadcaster: Sendable {
    private struct State {
        var subscribers: [Int: AsyncStream<ManagerEvent>.Continuation] = [:]
        var nextID = 0
        var isFinished = false
    }

    private let state = LockedValue(State())
    private let bufferSize: Int

    init(bufferSize: Int) {
        self.bufferSize = bufferSize
    }

    /// A new stream that receives every later event. Slow consumers lose the oldest events first.
    func subscribe() -> AsyncStream<ManagerEvent> {
        let (stream, continuation) = AsyncStream<ManagerEvent>.makeStream(bufferingPolicy: .bufferingNewest(bufferSize))
        let id: Int? = state.withLock { state in
            guard !state.isFinished else { return nil }
            let id = state.nextID
            state.nextID += 1
            state.subscribers[id] = continuation
            return id
        }
        guard let id else {
            continuation.finish()
            return stream
        }
        continuation.onTermination = { [weak self] _ in
            _ = self?.state.withLock { $0.subscribers.removeValue(forKey: id) }
        }
        return stream
    }

    func yield(_ event: ManagerEvent) {
        let subscribers = state.withLock { Array($0.subscribers.values) }
        for subscriber in subscribers { subscriber.yield(event) }
    }

    /// Ends every stream (the manager closed).
    func finish() {
        let subscribers = state.withLock { state in
            state.isFinished = true
            let subscribers = Array(state.subscribers.values)
            state.subscribers = [:]
            return subscribers
        }
        for subscriber in subscribers { subscriber.finish() }
    }
}
