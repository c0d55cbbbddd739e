import DownloadKit
import DownloadKitManager
import DownloadKitPostgres
import Foundation
import TestOrigin

/// The restore of `count` queued tasks, three ways, each timed from nothing open to the tasks in memory:
///
/// - `sqliteManager`: `DownloadManager(stateDirectory:)` on a state directory whose SQLite store holds them
///   (the `queue` scenario of downloadkit-bench, at 100,000);
/// - `postgresManager`: `PostgresTaskStore.open` and `DownloadManager(stateDirectory:store:)` on it: the same
///   manager restoring the same tasks from PostgreSQL (`TaskStoring.loadTasks`);
/// - `postgresList`: `PostgresTaskStore.open` and `fleetTasks()`, every row with its lease: what
///   `queue --store … list` reads. (A fleet worker, `queue run --store`, loads no queue at start: it opens the
///   store and claims.)
///
/// The tasks are queued once (not timed, but reported): `DownloadManager.enqueue` in one call for SQLite,
/// `PostgresTaskStore.add` 1,000 per call for PostgreSQL. The network is reported unreachable, so the
/// managers start nothing, and restored tasks keep their `waiting` state (`startsRestoredTasks`), so a restore
/// writes nothing back and every repeat restores the same rows.
struct RestoreRun {
    enum Way: String, Codable, Sendable, CaseIterable {
        case sqliteManager = "sqlite-manager"
        case postgresManager = "postgres-manager"
        case postgresList = "postgres-list"
    }

    struct Failure: Error, CustomStringConvertible {
        var description: String
    }

    var count: Int
    /// The SQLite manager's state directory.
    var sqliteState: String
    /// The PostgreSQL-backed manager's state directory (it holds no tasks).
    var postgresState: String
    var postgres: PostgresStoreURL
    var directory: String

    static let offline = NetworkStatus(isReachable: false, isMetered: false)
    static let configuration = DownloadManagerConfiguration(maxConcurrentDownloads: 3, startsRestoredTasks: true)

    /// Queues the tasks in both stores; returns the seconds each took.
    func prepare() async throws -> (sqlite: Double, postgres: Double) {
        let requests = (0..<count).map { taskRequest($0, prefix: "restore", directory: directory) }
        var start = ContinuousClock.now
        let manager = try await DownloadManager(
            stateDirectory: sqliteState, configuration: Self.configuration, networkMonitor: ManualNetworkMonitor(Self.offline))
        let ids = try await manager.enqueue(requests)
        await manager.close()
        let sqlite = secondsSince(start)
        guard Set(ids).count == count else { throw Failure(description: "SQLite: enqueued \(Set(ids).count) of \(count)") }
        start = ContinuousClock.now
        let added = try await ClaimsRun.queue(count, at: postgres, directory: directory, prefix: "restore")
        guard Set(added).count == count else { throw Failure(description: "PostgreSQL: added \(Set(added).count) of \(count)") }
        return (sqlite, secondsSince(start))
    }

    /// Restores once `way`; returns its seconds (checked: every task restored, still waiting).
    func measure(_ way: Way) async throws -> Double {
        let start = ContinuousClock.now
        let restored: [ManagedTask]
        let seconds: Double
        switch way {
        case .sqliteManager:
            let manager = try await DownloadManager(
                stateDirectory: sqliteState, configuration: Self.configuration,
                networkMonitor: ManualNetworkMonitor(Self.offline))
            seconds = secondsSince(start)
            restored = await manager.allTasks()
            await manager.close()
        case .postgresManager:
            let store = try await PostgresTaskStore.open(postgres)
            do {
                let manager = try await DownloadManager(
                    stateDirectory: postgresState, store: store, configuration: Self.configuration,
                    networkMonitor: ManualNetworkMonitor(Self.offline))
                seconds = secondsSince(start)
                restored = await manager.allTasks()
                await manager.close()
            } catch {
                await store.close()
                throw error
            }
            await store.close()
        case .postgresList:
            let store = try await PostgresTaskStore.open(postgres)
            do {
                restored = try await store.fleetTasks().map(\.task)
                seconds = secondsSince(start)
            } catch {
                await store.close()
                throw error
            }
            await store.close()
        }
        let waiting = restored.filter { $0.state == .waiting }.count
        guard restored.count == count, waiting == count else {
            throw Failure(description: "\(way.rawValue): restored \(restored.count) tasks (\(waiting) waiting), expected \(count)")
        }
        return seconds
    }
}
