import DownloadKit
import Foundation
import Testing
import TestOrigin

@testable import DownloadKitManager

/// The manager's progress flusher is woken by the first dirty task and writes within its interval; an idle
/// manager never wakes it (it used to tick every `progressPersistInterval`, 20 times a second at 50 ms).
@Suite("Manager progress flusher", .timeLimit(.minutes(5)))
struct ManagerFlusherTests {
    @Test func idleManagerNeverFlushesAndARunningTaskWakesTheFlusher() async throws {
        let origin = try FaultOrigin()
        defer { origin.shutdown() }
        origin.serve("/slow", .resource(Resource(size: 2 << 20, seed: 7, bytesPerSecond: 512 << 10)))
        let scratch = try ScratchDirectory()
        let manager = try await DownloadManager(
            stateDirectory: scratch.file("state"),
            configuration: DownloadManagerConfiguration(progressPersistInterval: .milliseconds(50)))
        try await Task.sleep(for: .seconds(1))
        #expect(await manager.progressFlushes == 0, "the flusher woke while no task ran")

        let id = try await manager.enqueue(url: origin.url("/slow"), destination: .file(scratch.file("out/slow")))
        let started = Date()
        // Waits for the flush itself; the cap only ends a run where it never comes (a suite's synchronous
        // tests once held the cooperative pool for 80 s, and a 10 s cap failed a flush that came after them).
        while await manager.progressFlushes == 0, Date().timeIntervalSince(started) < 120 {
            try await Task.sleep(for: .milliseconds(20))
        }
        // Only the flusher counts: a task's completion is written by the commit of its state, not by it.
        #expect(await manager.progressFlushes > 0, "no progress was written while the task ran")
        try await manager.pause(taskID: id)
        await manager.close()
    }
}
