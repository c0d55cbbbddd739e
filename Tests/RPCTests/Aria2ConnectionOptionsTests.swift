@_spi(DownloadKitInternal) import DownloadKit
import DownloadKitManager
import DownloadKitRPC
import Foundation
import Testing
import TestOrigin

/// aria2's `split` and `max-connection-per-server` as the task's connection count and connections per source
/// (issue #48), side by side with a real aria2c: `addUri` and `changeOption` set them, `getOption` reports
/// them, bad values get aria2's error, and they survive a restart.
extension Aria2CompatibilityTests {
    func options(_ sides: [Side], _ key: String) async throws -> (JSONValue?, JSONValue?) {
        let answers = try await both(sides, "aria2.getOption") { [.string($0.gids[key]!)] }
        let pick = { (answer: JSONValue) -> JSONValue? in
            let object = self.result(answer)?.objectValue
            return .array([object?["split"] ?? .null, object?["max-connection-per-server"] ?? .null])
        }
        return (pick(answers.0), pick(answers.1))
    }

    @Test func splitAndMaxConnectionPerServerAreTheTasksAndGetOptionReportsThem() async throws {
        try await sideBySide { sides, origin, scratch, ours in
            try await add(&sides, "c", origin.url("/slow-a.bin")) {
                ["pause": .string("true"), "out": .string("c-\($0).bin"), "split": .string("3"), "max-connection-per-server": .string("2")]
            }
            var reported = try await options(sides, "c")
            #expect(reported.0 == reported.1 && reported.1 == .array([.string("3"), .string("2")]), "aria2 \(String(describing: reported.0)) vs ours \(String(describing: reported.1))")
            let changed = try await both(sides, "aria2.changeOption") {
                [.string($0.gids["c"]!), .object(["split": .string("4"), "max-connection-per-server": .string("3")])]
            }
            #expect(changed.0 == changed.1 && result(changed.1) == .string("OK"), "aria2 \(changed.0.serialized) vs ours \(changed.1.serialized)")
            reported = try await options(sides, "c")
            #expect(reported.0 == reported.1 && reported.1 == .array([.string("4"), .string("3")]), "aria2 \(String(describing: reported.0)) vs ours \(String(describing: reported.1))")
            // Only one of them: the other is kept.
            _ = try await both(sides, "aria2.changeOption") { [.string($0.gids["c"]!), .object(["split": .string("5")])] }
            reported = try await options(sides, "c")
            #expect(reported.0 == reported.1 && reported.1 == .array([.string("5"), .string("3")]), "aria2 \(String(describing: reported.0)) vs ours \(String(describing: reported.1))")

            // Bad values: the same error from both on addUri and changeOption, nothing changed.
            let bad: [(String, String)] = [
                ("split", "0"), ("split", "-1"), ("split", "99999999999999999999999"), ("split", "x"),
                ("max-connection-per-server", "0"), ("max-connection-per-server", "17"),
                ("max-connection-per-server", "-9223372036854775809"),
            ]
            for (name, value) in bad {
                let added = try await both(sides, "aria2.addUri") { _ in
                    [.array([.string(origin.url("/small.bin"))]), .object([name: .string(value)])]
                }
                #expect(added.0 == added.1 && errorMessage(added.1)?.contains("'--\(name)'") == true, "\(name)=\(value): aria2 \(added.0.serialized) vs ours \(added.1.serialized)")
                let changedBad = try await both(sides, "aria2.changeOption") { [.string($0.gids["c"]!), .object([name: .string(value)])] }
                #expect(changedBad.0 == changedBad.1, "\(name)=\(value): aria2 \(changedBad.0.serialized) vs ours \(changedBad.1.serialized)")
            }
            reported = try await options(sides, "c")
            #expect(reported.0 == reported.1, "aria2 \(String(describing: reported.0)) vs ours \(String(describing: reported.1))")
            // Ours only: more connections than the engine makes (aria2 has no upper bound for split).
            let tooMany = try await rpcPost(
                port: ours.port,
                rpcCall("aria2.addUri", [.string("token:s3"), .array([.string(origin.url("/small.bin"))]), .object(["split": .string("65")])]))
            #expect(errorMessage(tooMany)?.contains("'--split'") == true, "\(tooMany.serialized)")

            // Kept across a restart: a new manager on the same state directory reports them.
            await ours.stop()
            let again = try await DownloadKitRPCPeer(directory: scratch.path, secret: "s3")
            let restored = try await rpcPost(
                port: again.port, rpcCall("aria2.getOption", [.string("token:s3"), .string(sides[1].gids["c"]!)]))
            #expect(result(restored)?.objectValue?["split"] == .string("5"), "\(restored.serialized)")
            #expect(result(restored)?.objectValue?["max-connection-per-server"] == .string("3"), "\(restored.serialized)")
            await again.stop()
        }
    }

    /// The task's counts reach the transfer's configuration (the one task → download mapping).
    @Test func aTasksConnectionCountsReachItsDownloadConfiguration() {
        let now = Date()
        var task = ManagedTask(
            id: "t", originalURL: "http://127.0.0.1:9/f", currentURL: "http://127.0.0.1:9/f", fileID: nil,
            destination: .file("/tmp/f"), path: "/tmp/f", state: .waiting, bytesReceived: 0, totalBytes: nil,
            priority: .normal, queueOrder: 0, group: nil, checksum: nil, headers: [:], metadata: [:],
            requiresUnmeteredNetwork: false, rateLimit: nil, error: nil, createdAt: now, updatedAt: now, finishedAt: nil)
        var base = DownloadConfiguration()
        base.connections = 2
        base.connectionsPerSource = 1
        #expect(task.download(base: base, limiters: []).configuration.connectionsPerSource == 1)
        task.connections = 6
        task.connectionsPerSource = 3
        let configuration = task.download(base: base, limiters: []).configuration
        #expect(configuration.connections == 6 && configuration.connectionsPerSource == 3)
    }
}
