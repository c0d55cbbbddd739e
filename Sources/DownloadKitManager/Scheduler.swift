import DownloadKit
/// The download manager's scheduling rules as a pure state machine: events in, actions out, no I/O.
///
/// The rules are those of the seeds' managers (YCDownloadSession, HWDownloadDemo, seed 001):
/// - At most ``maxConcurrent`` tasks run at once.
/// - A freed slot goes to the waiting task with the highest priority; among equals, to the one that
///   joined the waiting line earliest. A task joins the line when it is enqueued and again whenever
///   the user starts or resumes it (``resume(_:)`` gives it a fresh, later place).
/// - Lowering the limit sends the running tasks that joined the line most recently back to waiting
///   first (lowest priority first, then latest place); they keep their place, so they start again
///   before tasks that joined after them.
/// - A task may only run while the network allows it (``NetworkStatus``): nothing runs while the network
///   is down; on a metered network only tasks that accept metered networks run (and none when
///   ``allowsMeteredNetwork`` is false). Running tasks the network no longer allows go back to waiting
///   and start again, in their place, when it does.
/// - Enqueuing a task never interrupts a running one: priority decides who gets the next free slot.
///
/// Costs: starting, stopping and finishing are O(log n) in the number of waiting tasks (a binary heap
/// with lazy deletion); listing the line in order and ``move(_:toPosition:)`` sort it, O(n log n).
package struct Scheduler: Sendable {
    /// What the owner must do.
    package enum Action: Sendable, Hashable {
        /// Start (or resume) the transfer of this task.
        case start(String)
        /// Stop this running task's transfer, keeping its bytes; it is waiting again (lowered limit).
        case requeue(String)
        /// Stop this running task's transfer, keeping its bytes; it waits for the network to allow it.
        case holdForNetwork(String)
        /// Nothing runs or waits any more after a task ended (seed 000's all-finished notification;
        /// paused and failed tasks do not count).
        case allFinished
    }

    /// A task known to the scheduler (waiting or running).
    package struct Entry: Sendable, Hashable {
        package var id: String
        package var priority: Int
        /// The place in the waiting line: smaller joined earlier.
        package var order: Int64
        /// Whether the task may only run on an unmetered network.
        package var requiresUnmeteredNetwork: Bool

        package init(id: String, priority: Int, order: Int64, requiresUnmeteredNetwork: Bool = false) {
            self.id = id
            self.priority = priority
            self.order = order
            self.requiresUnmeteredNetwork = requiresUnmeteredNetwork
        }

        /// Whether `self` comes before `other` in the waiting line.
        func precedes(_ other: Entry) -> Bool {
            if priority != other.priority { return priority > other.priority }
            if order != other.order { return order < other.order }
            return id < other.id
        }
    }

    /// Spacing of fresh places in the line, so ``move(_:toPosition:)`` can put a task between two others.
    package static let orderStep: Int64 = 1 << 16

    /// The most tasks running at once (at least 1).
    package private(set) var maxConcurrent: Int
    /// The network as last reported.
    package private(set) var network: NetworkStatus
    /// Whether tasks that accept metered networks may run on one (iOS's `allowsCellularAccess`).
    package private(set) var allowsMeteredNetwork: Bool

    private var entries: [String: Entry] = [:]
    private var running: Set<String> = []
    /// Waiting tasks that may run on a metered network / only on an unmetered one. Each heap may hold
    /// stale copies (removed tasks, changed priorities); `entries` is the truth.
    private var anyNetworkLine = Heap()
    private var unmeteredLine = Heap()
    private var waitingCount = 0
    private var nextOrder: Int64

    /// Creates an empty scheduler.
    /// - Parameters:
    ///   - maxConcurrent: The limit; values below 1 count as 1.
    ///   - network: The network's state; reachable and unmetered by default.
    ///   - firstOrder: The place the next task gets (restore: one step after the largest stored place).
    package init(
        maxConcurrent: Int = 3, network: NetworkStatus = NetworkStatus(isReachable: true, isMetered: false),
        allowsMeteredNetwork: Bool = true, firstOrder: Int64 = Scheduler.orderStep
    ) {
        self.maxConcurrent = max(1, maxConcurrent)
        self.network = network
        self.allowsMeteredNetwork = allowsMeteredNetwork
        self.nextOrder = firstOrder
    }

    // MARK: - Queries

    /// The running tasks (unordered).
    package var runningIDs: Set<String> { running }
    /// How many tasks wait (including those held for the network).
    package var waitingTaskCount: Int { waitingCount }
    /// Whether nothing runs and nothing waits.
    package var isIdle: Bool { running.isEmpty && waitingCount == 0 }
    /// The waiting line in order (first starts next, network permitting). O(n log n).
    package var waitingIDs: [String] { waitingEntries.map(\.id) }
    /// The entry of a waiting or running task.
    package func entry(_ id: String) -> Entry? { entries[id] }
    /// Whether the task is running.
    package func isRunning(_ id: String) -> Bool { running.contains(id) }
    /// Whether the task is waiting.
    package func isWaiting(_ id: String) -> Bool { entries[id] != nil && !running.contains(id) }
    /// Whether the network currently lets this task run.
    package func networkAllows(_ id: String) -> Bool {
        entries[id].map { networkAllows(requiresUnmetered: $0.requiresUnmeteredNetwork) } ?? false
    }

    private var waitingEntries: [Entry] {
        entries.values.filter { !running.contains($0.id) }.sorted { $0.precedes($1) }
    }

    // MARK: - Events

    /// A task joins the end of the waiting line (enqueued, or started/resumed by the user) with a fresh place.
    /// A task already waiting or running is left alone.
    /// - Returns: The place it got (persist it), and the actions.
    package mutating func resume(
        _ id: String, priority: Int, requiresUnmeteredNetwork: Bool = false
    ) -> (order: Int64, actions: [Action]) {
        if let existing = entries[id] { return (existing.order, []) }
        let order = nextOrder
        nextOrder += Self.orderStep
        addWaiting(Entry(id: id, priority: priority, order: order, requiresUnmeteredNetwork: requiresUnmeteredNetwork))
        return (order, fillSlots())
    }

    /// Puts a waiting task back in its stored place without scheduling (restoring after a restart); call
    /// ``schedule()`` once all are restored.
    package mutating func restore(_ entry: Entry) {
        guard entries[entry.id] == nil else { return }
        // Orders come from stored rows: one far from any order this scheduler writes (a damaged or
        // hand-edited row) is clamped into ±2⁶², so no later step can overflow.
        var entry = entry
        entry.order = min(max(entry.order, -Self.maxRestoredOrder), Self.maxRestoredOrder)
        nextOrder = max(nextOrder, entry.order + Self.orderStep)
        addWaiting(entry)
    }

    /// The largest order magnitude ``restore(_:)`` accepts.
    package static let maxRestoredOrder: Int64 = 1 << 62

    /// Fills free slots from the waiting line.
    package mutating func schedule() -> [Action] { fillSlots() }

    /// The user paused, cancelled or removed a task: it leaves the line or frees its slot. The owner stops
    /// its transfer itself. Never reports all-finished (the user, not an end, emptied the line).
    package mutating func withdraw(_ id: String) -> [Action] {
        guard removeEntry(id) else { return [] }
        return fillSlots()
    }

    /// A task's transfer ended (completed or failed): its slot is freed.
    package mutating func taskEnded(_ id: String) -> [Action] {
        guard removeEntry(id) else { return [] }
        var actions = fillSlots()
        if isIdle { actions.append(.allFinished) }
        return actions
    }

    /// Changes the limit. Lowering it sends running tasks back to waiting, the last in line first.
    package mutating func setMaxConcurrent(_ limit: Int) -> [Action] {
        maxConcurrent = max(1, limit)
        var actions: [Action] = []
        if running.count > maxConcurrent {
            let victims = running.compactMap { entries[$0] }.sorted { $0.precedes($1) }.suffix(running.count - maxConcurrent)
            for victim in victims.reversed() {
                sendBack(victim)
                actions.append(.requeue(victim.id))
            }
        }
        return actions + fillSlots()
    }

    /// Changes a waiting or running task's priority (a running task keeps running).
    package mutating func setPriority(_ id: String, _ priority: Int) -> [Action] {
        guard var entry = entries[id], entry.priority != priority else { return [] }
        entry.priority = priority
        entries[id] = entry
        if !running.contains(id) { push(entry) }
        return fillSlots()
    }

    /// Moves a waiting task to `position` (0 = next to start) in the waiting line. To land exactly there it
    /// takes the priority of the task it displaces (or of its new predecessor at the end of the line).
    /// - Returns: The task's new entry (persist its priority and place); `renumbered`, the entries whose
    ///   places changed when there was no room left between two neighbours (rare: persist them too); the
    ///   actions. Nil when the task is not waiting.
    package mutating func move(
        _ id: String, toPosition position: Int
    ) -> (entry: Entry, renumbered: [Entry], actions: [Action])? {
        guard entries[id] != nil, !running.contains(id) else { return nil }
        var renumbered: [Entry] = []
        var placed = place(id, at: position)
        if placed == nil {
            // No room between the neighbours: renumber every task, keeping the order, then place again.
            let all = entries.values.sorted { $0.precedes($1) }
            for (index, var entry) in all.enumerated() {
                entry.order = Self.orderStep * Int64(index + 1)
                entries[entry.id] = entry
                if !running.contains(entry.id) { push(entry) }
                renumbered.append(entry)
            }
            nextOrder = Self.orderStep * Int64(all.count + 1)
            placed = place(id, at: position)
        }
        guard let entry = placed else { return nil }
        entries[id] = entry
        push(entry)
        return (entry, renumbered.filter { $0.id != id }, fillSlots())
    }

    /// The entry `id` would have at `position` of the line without it, or nil when its neighbours leave no room.
    private mutating func place(_ id: String, at position: Int) -> Entry? {
        guard var entry = entries[id] else { return nil }
        let line = waitingEntries.filter { $0.id != id }
        let index = min(max(0, position), line.count)
        let after = index < line.count ? line[index] : nil
        let before = index > 0 ? line[index - 1] : nil
        entry.priority = after?.priority ?? before?.priority ?? entry.priority
        let low = before?.priority == entry.priority ? before?.order : nil
        let high = after?.priority == entry.priority ? after?.order : nil
        switch (low, high) {
        case (_, nil):
            entry.order = nextOrder
            nextOrder += Self.orderStep
        case (nil, let high?):
            entry.order = high - Self.orderStep
        case (let low?, let high?):
            guard high - low >= 2 else { return nil }
            entry.order = low + (high - low) / 2
        }
        return entry
    }

    /// The network changed: tasks it no longer allows stop and wait; waiting tasks it allows start.
    package mutating func setNetwork(_ status: NetworkStatus) -> [Action] {
        network = status
        return enforceNetwork()
    }

    /// Allows or forbids metered networks for every task.
    package mutating func setAllowsMeteredNetwork(_ allowed: Bool) -> [Action] {
        allowsMeteredNetwork = allowed
        return enforceNetwork()
    }

    // MARK: - Internals

    private func networkAllows(requiresUnmetered: Bool) -> Bool {
        guard network.isReachable else { return false }
        guard network.isMetered else { return true }
        return allowsMeteredNetwork && !requiresUnmetered
    }

    private mutating func enforceNetwork() -> [Action] {
        var actions: [Action] = []
        let held = running.compactMap { entries[$0] }.filter { !networkAllows(requiresUnmetered: $0.requiresUnmeteredNetwork) }
        for entry in held.sorted(by: { $0.precedes($1) }) {
            sendBack(entry)
            actions.append(.holdForNetwork(entry.id))
        }
        return actions + fillSlots()
    }

    private mutating func addWaiting(_ entry: Entry) {
        entries[entry.id] = entry
        waitingCount += 1
        push(entry)
    }

    /// A running task goes back to the waiting line, in its place.
    private mutating func sendBack(_ entry: Entry) {
        running.remove(entry.id)
        waitingCount += 1
        push(entry)
    }

    private mutating func push(_ entry: Entry) {
        if entry.requiresUnmeteredNetwork { unmeteredLine.push(entry) } else { anyNetworkLine.push(entry) }
    }

    /// Removes a task; returns whether it was known.
    private mutating func removeEntry(_ id: String) -> Bool {
        guard entries.removeValue(forKey: id) != nil else { return false }
        if running.remove(id) == nil { waitingCount -= 1 }
        // Stale heap copies are skipped lazily.
        return true
    }

    /// Whether a heap element is the current copy of a waiting task.
    private func isCurrent(_ element: Entry) -> Bool {
        guard let entry = entries[element.id], !running.contains(element.id) else { return false }
        return entry == element
    }

    private mutating func fillSlots() -> [Action] {
        var actions: [Action] = []
        while running.count < maxConcurrent {
            while let top = anyNetworkLine.top, !isCurrent(top) { anyNetworkLine.pop() }
            while let top = unmeteredLine.top, !isCurrent(top) { unmeteredLine.pop() }
            var candidates: [Entry] = []
            if networkAllows(requiresUnmetered: false), let top = anyNetworkLine.top { candidates.append(top) }
            if networkAllows(requiresUnmetered: true), let top = unmeteredLine.top { candidates.append(top) }
            guard let next = candidates.min(by: { $0.precedes($1) }) else { break }
            if next.requiresUnmeteredNetwork { unmeteredLine.pop() } else { anyNetworkLine.pop() }
            running.insert(next.id)
            waitingCount -= 1
            actions.append(.start(next.id))
        }
        // Keep stale copies from piling up when priorities change often.
        if anyNetworkLine.count + unmeteredLine.count > 2 * max(64, entries.count) {
            let current = self
            anyNetworkLine.rebuild(keeping: current.isCurrent)
            unmeteredLine.rebuild(keeping: current.isCurrent)
        }
        return actions
    }
}

/// A binary min-heap of entries in waiting-line order.
struct Heap: Sendable {
    private var items: [Scheduler.Entry] = []

    var count: Int { items.count }
    var top: Scheduler.Entry? { items.first }

    mutating func push(_ entry: Scheduler.Entry) {
        items.append(entry)
        var child = items.count - 1
        while child > 0 {
            let parent = (child - 1) / 2
            guard items[child].precedes(items[parent]) else { break }
            items.swapAt(child, parent)
            child = parent
        }
    }

    mutating func pop() {
        guard !items.isEmpty else { return }
        items.swapAt(0, items.count - 1)
        items.removeLast()
        var parent = 0
        while true {
            let left = 2 * parent + 1
            let right = left + 1
            var best = parent
            if left < items.count, items[left].precedes(items[best]) { best = left }
            if right < items.count, items[right].precedes(items[best]) { best = right }
            if best == parent { return }
            items.swapAt(parent, best)
            parent = best
        }
    }

    mutating func rebuild(keeping isCurrent: (Scheduler.Entry) -> Bool) {
        let kept = Set(items.filter(isCurrent))
        items = []
        for entry in kept { push(entry) }
    }
}
