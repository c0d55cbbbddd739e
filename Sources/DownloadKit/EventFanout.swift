import HTTPClient

/// Delivers one producer's events to any number of subscribers, each with its own bounded queue.
///
/// The rule for slow consumers lives here, once: a subscriber that keeps up gets every event; once
/// `capacity` events wait, a new droppable event (progress) replaces the droppable one at the tail when
/// ``canReplace`` says it supersedes it (the same task's progress), and otherwise the oldest waiting
/// droppable event is dropped. Every other event (state changes, the terminal event) is always
/// delivered, in order. The first subscriber also receives what
/// was sent before it subscribed when `keepsBacklog` (so `start()` then `for await … in events` misses
/// nothing); later
/// subscribers see every event from when they subscribe. A subscriber that arrives after the end
/// receives the terminal event and then the end of the sequence.
package final class EventFanout<Event: Sendable>: Sendable {
    private struct Subscriber {
        var queue: [Event] = []
        var head = 0
        var waiter: CheckedContinuation<Event?, Never>?
        var ended = false

        var isEmpty: Bool { head == queue.count }

        /// Removes the oldest waiting event that `isDroppable` accepts, if any.
        mutating func dropOldest(where isDroppable: (Event) -> Bool) {
            guard let index = queue[head...].firstIndex(where: isDroppable) else { return }
            queue.remove(at: index)
        }

        /// Takes `event` (nil: only the end) by the rule above; returns the continuation to resume with it
        /// when the subscriber was waiting (its queue is then empty, so the event is handed over directly).
        mutating func receive(
            _ event: Event?, terminal: Bool, droppable: Bool, capacity: Int,
            isDroppable: (Event) -> Bool, canReplace: (_ queued: Event, _ new: Event) -> Bool
        ) -> CheckedContinuation<Event?, Never>? {
            if terminal { ended = true }
            if let waiter {
                self.waiter = nil
                return waiter
            }
            guard let event else { return nil }
            // Below capacity everything is kept; at capacity a droppable event first tries to supersede
            // the one waiting at the tail, else the oldest droppable one goes.
            if droppable, queue.count - head >= capacity, let last = queue.last, isDroppable(last),
                canReplace(last, event)
            {
                queue[queue.count - 1] = event
            } else {
                queue.append(event)
                if queue.count - head > capacity { dropOldest(where: isDroppable) }
            }
            return nil
        }

        mutating func popFirst() -> Event? {
            guard head < queue.count else { return nil }
            let event = queue[head]
            head += 1
            if head >= 64 && head * 2 >= queue.count {
                queue.removeFirst(head)
                head = 0
            }
            return event
        }
    }

    private struct State {
        var subscribers: [Int: Subscriber] = [:]
        var nextID = 0
        var finished = false
        var terminal: Event?
        /// What was sent before anyone subscribed; handed to the first subscriber (when kept at all).
        var backlog: Subscriber?
    }

    private let state = LockedValue(State())
    private let capacity: Int
    private let isDroppable: @Sendable (Event) -> Bool
    private let canReplace: @Sendable (_ queued: Event, _ new: Event) -> Bool

    /// - Parameters:
    ///   - capacity: Events a subscriber may have waiting before droppable ones are dropped.
    ///   - isDroppable: Events a slow subscriber may lose (progress).
    ///   - canReplace: Whether a new droppable event supersedes the droppable one waiting at the tail.
    ///   - keepsBacklog: Whether events sent before the first subscription are kept for it (a
    ///     download's short life: yes; a long-lived manager: no).
    package init(
        capacity: Int = 1024, keepsBacklog: Bool, isDroppable: @escaping @Sendable (Event) -> Bool,
        canReplace: @escaping @Sendable (_ queued: Event, _ new: Event) -> Bool
    ) {
        if keepsBacklog { state.withLock { $0.backlog = Subscriber() } }
        self.capacity = max(2, capacity)
        self.isDroppable = isDroppable
        self.canReplace = canReplace
    }

    /// Registers a subscriber that sees every event from now on (or only the terminal one after the end).
    package func subscribe() -> Int {
        state.withLock { state in
            let id = state.nextID
            state.nextID += 1
            var subscriber = Subscriber()
            if let backlog = state.backlog {
                subscriber = backlog
                state.backlog = nil
            } else if state.finished {
                if let terminal = state.terminal { subscriber.queue.append(terminal) }
                subscriber.ended = true
            }
            state.subscribers[id] = subscriber
            return id
        }
    }

    /// Forgets a subscriber (its sequence was dropped or its task cancelled).
    package func unsubscribe(_ id: Int) {
        let waiter = state.withLock { state in state.subscribers.removeValue(forKey: id)?.waiter }
        waiter?.resume(returning: nil)
    }

    /// Delivers `event` to every subscriber.
    package func yield(_ event: Event) {
        deliver(event, terminal: false)
    }

    /// Delivers the terminal event (when given) and ends every subscriber's sequence. Later calls and
    /// later events are ignored.
    package func finish(with terminal: Event?) {
        if let terminal {
            deliver(terminal, terminal: true)
        } else {
            deliver(nil, terminal: true)
        }
    }

    private func deliver(_ event: Event?, terminal: Bool) {
        // Nobody to deliver to (no subscriber, no backlog kept): nothing to do but record the end. The
        // look is its own short lock with a plain `Bool` answer: the delivery below builds its list of
        // waiters with generic metadata looked up on every call — a manager enqueuing 10,000 tasks with
        // nobody subscribed spent about 13 % of the batch there. The event counts as sent before anyone who
        // subscribes now.
        if !terminal, !state.withLock({ $0.backlog != nil || !$0.subscribers.isEmpty }) { return }
        let droppable = event.map(isDroppable) ?? false
        let capacity = self.capacity
        let isDroppable = self.isDroppable
        let canReplace = self.canReplace
        // Every woken subscriber receives the same `event`, so the list holds only continuations. The
        // per-subscriber rule is a method of `Subscriber`: a local function here stayed generic over
        // `Event` when `deliver` was specialised, and its value-witness and metadata calls made this the
        // deepest chain of a transfer thread (docs/BENCHMARKS.md, "Stacks at 1,024 transfers").
        let woken: [CheckedContinuation<Event?, Never>] = state.withLock { state in
            guard !state.finished else { return [] }
            if terminal {
                state.finished = true
                state.terminal = event
            }
            var woken: [CheckedContinuation<Event?, Never>] = []
            if state.backlog != nil,
                let waiter = state.backlog!.receive(
                    event, terminal: terminal, droppable: droppable, capacity: capacity,
                    isDroppable: isDroppable, canReplace: canReplace)
            {
                woken.append(waiter)
            }
            // By index, in place: iterating `keys` keeps a reference to the dictionary's storage, so the
            // first write through `[id]!` copied the dictionary (every event, every subscriber's entry).
            var index = state.subscribers.startIndex
            while index != state.subscribers.endIndex {
                if let waiter = state.subscribers.values[index].receive(
                    event, terminal: terminal, droppable: droppable, capacity: capacity,
                    isDroppable: isDroppable, canReplace: canReplace)
                {
                    woken.append(waiter)
                }
                state.subscribers.formIndex(after: &index)
            }
            return woken
        }
        for waiter in woken { waiter.resume(returning: event) }
    }

    /// The subscriber's next event, or nil once its sequence has ended.
    package func next(_ id: Int) async -> Event? {
        await withTaskCancellationHandler {
            await withCheckedContinuation { (continuation: CheckedContinuation<Event?, Never>) in
                let ready: Event?? = state.withLock { state in
                    // Mutated in place (`[id]!`): with a copy taken out and written back, the dictionary still
                    // held the queue's buffer, so a compaction in `popFirst` copied the whole queue.
                    guard state.subscribers[id] != nil else { return .some(nil) }
                    if let event = state.subscribers[id]!.popFirst() { return .some(event) }
                    if state.subscribers[id]!.ended {
                        state.subscribers[id] = nil
                        return .some(nil)
                    }
                    state.subscribers[id]!.waiter = continuation
                    return .none
                }
                if let ready { continuation.resume(returning: ready) }
            }
        } onCancel: {
            unsubscribe(id)
        }
    }
}

/// An `AsyncSequence` over one subscription of an ``EventFanout``. The subscription starts when the
/// sequence is created (each `events` access is a new subscriber that sees every event from then on,
/// even those sent before iteration begins) and ends when the sequence and its iterator are gone
/// (leaving a `for await` early unsubscribes). Iterate each sequence once.
public struct EventSequence<Element: Sendable>: AsyncSequence, Sendable {
    public typealias Failure = Never
    private let subscription: Subscription

    package init(_ fanout: EventFanout<Element>) {
        subscription = Subscription(fanout: fanout)
    }

    public func makeAsyncIterator() -> Iterator {
        Iterator(subscription)
    }

    /// Iterates the subscription.
    public struct Iterator: AsyncIteratorProtocol {
        private let subscription: Subscription

        fileprivate init(_ subscription: Subscription) {
            self.subscription = subscription
        }

        public mutating func next() async -> Element? {
            await subscription.fanout.next(subscription.id)
        }

        public mutating func next(isolation actor: isolated (any Actor)?) async -> Element? {
            await subscription.fanout.next(subscription.id)
        }
    }

    /// Ends the subscription when the last reference to it goes away.
    fileprivate final class Subscription: Sendable {
        let fanout: EventFanout<Element>
        let id: Int

        init(fanout: EventFanout<Element>) {
            self.fanout = fanout
            self.id = fanout.subscribe()
        }

        deinit { fanout.unsubscribe(id) }
    }
}
