import Foundation
import Testing
import TestOrigin

/// kill -9 of `downloadkit queue run` while bytes flow (issue #20): the older manager kill test kills
/// while every response is stalled (nothing being written); here the origin never stalls, it streams at
/// 2 MiB/s, so the kill lands between or during writes. The rerun completes every task byte-identical
/// and resumes each from its bytes on disk (a Range request starting past 0).
@Suite(.timeLimit(.minutes(3)))
struct KillWhileFlowingTests {
    @Test func queueRunKilledWhileBytesFlowResumesEveryTask() async throws {
        let size: Int64 = 16 << 20
        let origin = try FaultOrigin()
        let names = ["w0.bin", "w1.bin", "w2.bin"]
        for (i, name) in names.enumerated() {
            origin.serve("/" + name, .resource(Resource(size: size, seed: UInt64(120 + i), bytesPerSecond: 2 << 20)))
        }
        let helper = QueueCLITests()
        let q = try QueueCLITests.Queue()
        for name in names {
            let added = try await helper.queue(["add", origin.url("/" + name), "-o", q.downloads.file(name)], q)
            #expect(added.exitCode == 0, "\(added.output)")
        }
        let (child, log) = try helper.startRun(["--max-concurrent", "3", "--progress", "none"], q)
        defer { try? FileManager.default.removeItem(atPath: log) }
        let parts = names.map { q.downloads.file($0 + ".dkpart") }
        let flowing = try await helper.waitForBytes(parts, atLeast: 1 << 20)
        let before = parts.map(QueueCLITests.size)
        kill(child.pid, SIGKILL)
        let exited = try await offloaded { child.waitForExit(timeout: 10) }
        #expect(exited.map { WaitStatus($0).signal } == SIGKILL)
        #expect(flowing, "every task had 1 MiB on disk before the kill: \(before)")
        #expect(before.allSatisfy { $0 < size }, "a task finished before the kill: \(before)")
        for name in names where FileManager.default.fileExists(atPath: q.downloads.file(name)) {
            Issue.record("\(name) exists under its final name after the kill")
        }

        for (i, name) in names.enumerated() {
            origin.serve("/" + name, .resource(Resource(size: size, seed: UInt64(120 + i))))
        }
        let requestsBefore = names.map { origin.requests("/" + $0).count }
        let rerun = try await helper.queue(["run", "--max-concurrent", "3", "--progress", "none"], q, timeout: 120)
        #expect(rerun.exitCode == 0, "\(rerun.output)")
        for (i, name) in names.enumerated() {
            #expect(fileMatchesPattern(q.downloads.file(name), size: size, seed: UInt64(120 + i)), "\(name)")
            let starts = origin.requests("/" + name).dropFirst(requestsBefore[i]).compactMap { request -> Int64? in
                guard let range = request.header("Range") else { return 0 }
                return Int64(range.dropFirst(6).split(separator: "-")[0])
            }
            #expect(starts.contains { $0 > 0 }, "\(name) was not resumed from its bytes on disk: \(starts)")
        }
        let tasks = try await helper.list(q)
        #expect(tasks.count == 3 && tasks.allSatisfy { $0["state"] as? String == "completed" }, "\(tasks)")
    }
}
