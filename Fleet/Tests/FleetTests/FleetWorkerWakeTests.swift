import DownloadKit
import DownloadKitManager
import Foundation
import Testing
import TestOrigin

@testable import DownloadKitPostgres

/// A fleet worker looks for work when the store announces a change (LISTEN/NOTIFY on `downloadkit_task`),
/// not on a timer: with the poll interval set to an hour, a task added after the worker found the queue
/// empty is still claimed at once, and an idle worker does not look again and again.
@Suite(.serialized, .timeLimit(.minutes(5)))
struct FleetWorkerWakeTests {
    @Test func aTaskAddedLaterIsClaimedAtOnceAlthoughThePollIntervalIsAnHour() async throws {
        try await withPostgres { server in
            let origin = try FaultOrigin()
            defer { origin.shutdown() }
            origin.serve("/late.bin", .resource(Resource(size: 64 << 10, seed: 46)))
            let scratch = try ScratchDirectory()
            let store = try await openStore(server)
            let worker = try FleetWorker(
                store: store,
                configuration: .init(
                    workerID: "listener", maxConcurrent: 1, lease: .seconds(3600), pollInterval: .seconds(3600),
                    stopsWhenQueueIsEmpty: false))
            let running = Task { try await worker.run() }
            // Idle: it looked once at the start (and once more when its LISTEN was in place), then sleeps.
            try await Task.sleep(for: .seconds(2))
            let idleRounds = await worker.claimRounds
            #expect(idleRounds >= 1 && idleRounds <= 3, "\(idleRounds) looks for work while the queue was empty")

            let request = DownloadManager.TaskRequest(url: origin.url("/late.bin"), destination: .file(scratch.file("late.bin")))
            let id = try #require(try await store.add([request], defaultDirectory: scratch.path).first?.id)
            let completed = await eventually(seconds: 30) {
                (try? await store.fleetTask(id))?.task.state == .completed
            }
            #expect(completed, "the task added later was not claimed")
            #expect(fileMatchesPattern(scratch.file("late.bin"), size: 64 << 10, seed: 46))
            await worker.stop()
            _ = try await running.value
            await store.close()
        }
    }
}
