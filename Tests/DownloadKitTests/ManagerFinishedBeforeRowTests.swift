import Foundation
import HTTPClient
import TestOrigin
import Testing

import DownloadKit
@testable import DownloadKitManager

/// Issue #13, defect 10: a manager that died between the engine's final rename and its task row's
/// update downloaded the whole file again on restart and ran its completion hook twice. The death is
/// reproduced exactly: the row of a finished task is put back to `running` (what the row held at
/// that instant) with the file already in place.
@Suite("Manager: a file finished just before a crash", .serialized)
struct ManagerFinishedBeforeRowTests {
    /// Runs one task to completion, then rewrites its row as the crash left it.
    func finishThenRewindRow(_ origin: FaultOrigin, state: String, destination: String) async throws -> String {
        let manager = try await DownloadManager(stateDirectory: state, configuration: managerConfiguration())
        let id = try await manager.enqueue(url: origin.url("/done.bin"), destination: .file(destination))
        #expect(await eventually { await manager.task(id)?.state == .completed })
        await manager.close()
        let store = try TaskStore(directory: state)
        var record = try #require(try store.loadAll().first { $0.id == id })
        var task = record.task
        task.state = .running
        task.path = nil
        task.finishedAt = nil
        record = TaskRecord(task)
        try store.write([record])
        return id
    }

    @Test func theFileIsRecognisedAndTheHookRunsOnceWithoutADownload() async throws {
        let origin = try FaultOrigin()
        defer { origin.shutdown() }
        let size: Int64 = 2 << 20
        origin.serve("/done.bin", .resource(Resource(size: size, seed: 61)))
        let scratch = try ScratchDirectory()
        let destination = scratch.file("out/done.bin")
        let id = try await finishThenRewindRow(origin, state: scratch.file("state"), destination: destination)
        let requestsBefore = origin.requests("/done.bin").count

        let manager = try await DownloadManager(
            stateDirectory: scratch.file("state"), configuration: managerConfiguration(startsRestoredTasks: true))
        let completions = LockedValue<[TaskCompletion]>([])
        await manager.setCompletionHandler { completion in completions.withLock { $0.append(completion) } }
        #expect(await manager.task(id)?.state == .completed)
        #expect(await manager.task(id)?.path == destination)
        let delivered = completions.withLock { $0 }
        #expect(delivered.count == 1)
        #expect((try? delivered.first?.result.get())?.path == destination)
        // Nothing was downloaded again, and the file is the one the first run wrote.
        try await Task.sleep(for: .milliseconds(300))
        #expect(origin.requests("/done.bin").count == requestsBefore)
        #expect(fileMatchesPattern(destination, size: size, seed: 61))
        await manager.close()
    }

    @Test func aFileThatIsNotTheTasksIsDownloadedAgain() async throws {
        let origin = try FaultOrigin()
        defer { origin.shutdown() }
        let size: Int64 = 1 << 20
        origin.serve("/done.bin", .resource(Resource(size: size, seed: 62)))
        let scratch = try ScratchDirectory()
        let destination = scratch.file("out/done.bin")
        let id = try await finishThenRewindRow(origin, state: scratch.file("state"), destination: destination)
        // Someone replaced the file with another one (no xattrs): it is not this task's download.
        try FileManager.default.removeItem(atPath: destination)
        try Data(repeating: 7, count: 1000).write(to: URL(fileURLWithPath: destination))

        let manager = try await DownloadManager(
            stateDirectory: scratch.file("state"), configuration: managerConfiguration(startsRestoredTasks: true))
        #expect(await eventually { await manager.task(id)?.state == .completed })
        #expect(fileMatchesPattern(destination, size: size, seed: 62))
        await manager.close()
    }
}
