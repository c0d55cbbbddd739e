import DownloadKit
import DownloadKitManager
import Foundation
import HTTPClient
import TestOrigin
import Testing

/// A store that records the rows in the order they are handed over. While its gate is closed, an awaited
/// `save` waits at the gate before it hands its rows over — as an async call does that has left the caller's
/// actor and not yet reached the store's queue.
private final class HandOverOrderStore: TaskStoring {
    private struct State {
        var written: [ManagedTask] = []
        var gateClosed = false
        var atGate: [CheckedContinuation<Void, Never>] = []
    }

    private let state = LockedValue(State())
    let location = "memory"

    var written: [ManagedTask] { state.withLock { $0.written } }

    func closeGate() { state.withLock { $0.gateClosed = true } }

    func openGate() {
        let waiting = state.withLock { state -> [CheckedContinuation<Void, Never>] in
            state.gateClosed = false
            defer { state.atGate = [] }
            return state.atGate
        }
        for waiter in waiting { waiter.resume() }
    }

    func loadTasks() async throws -> [ManagedTask] { [] }

    func save(_ tasks: [ManagedTask], deleting deletions: [String]) async throws {
        await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
            let passes = state.withLock { state -> Bool in
                if state.gateClosed { state.atGate.append(continuation) }
                return !state.gateClosed
            }
            if passes { continuation.resume() }
        }
        handOver(tasks)
    }

    func saveInBackground(
        _ tasks: [ManagedTask], deleting deletions: [String], failed: @escaping @Sendable (any Error) -> Void
    ) {
        handOver(tasks)
    }

    func drain() async {}

    private func handOver(_ tasks: [ManagedTask]) {
        state.withLockWakingWaiters { $0.written += tasks }
    }
}

@Suite("Manager: rows reach the store in the order they were taken")
struct ManagerWriteOrderTests {
    /// A change awaited by its caller (here a priority) and a newer row of the same task written in the
    /// background meanwhile (the network comes back: the task starts) reach the store in that order. The
    /// awaited write used to be handed over only once its async call reached the store: the running row
    /// went first, and the older waiting row overwrote it (a CI run under load read a failed task back as
    /// waiting that way).
    @Test func anAwaitedChangeIsHandedOverBeforeANewerBackgroundRow() async throws {
        let scratch = try ScratchDirectory()
        let store = HandOverOrderStore()
        let network = ManualNetworkMonitor(NetworkStatus(isReachable: false, isMetered: false))
        let manager = try await DownloadManager(
            stateDirectory: scratch.path, store: store, configuration: managerConfiguration(), networkMonitor: network)
        // Nothing listens there: the transfer that starts later fails at once, which is fine here.
        let id = try await manager.enqueue(url: "http://127.0.0.1:9/order.bin", destination: .file(scratch.file("order.bin")))

        store.closeGate()
        let change = Task { try await manager.setPriority(taskID: id, .high) }
        // The change has been taken (the actor is free again) once a call that needs the actor sees it.
        while await manager.task(id)?.priority != .high { await Task.yield() }
        network.update(NetworkStatus(isReachable: true, isMetered: false))
        // Until the start's row is handed over (the manager's own tasks run meanwhile; nothing blocks a thread).
        while !store.written.contains(where: { $0.id == id && $0.state != .waiting }) { await Task.yield() }
        store.openGate()
        try await change.value
        await manager.close()

        let rows = store.written.filter { $0.id == id }
        let waitingHigh = rows.firstIndex { $0.state == .waiting && $0.priority == .high }
        let firstStarted = rows.firstIndex { $0.state != .waiting }
        #expect(
            waitingHigh != nil && firstStarted != nil && waitingHigh! < firstStarted!,
            "handed over: \(rows.map { "\($0.state)/\($0.priority.rawValue)" })")
    }
}
