import DownloadKit
import DownloadKitRPC
import Foundation
import Testing
import TestOrigin

/// The same calls to a real `aria2c --enable-rpc` and to our server, against one origin; response shapes
/// (keys, value types), error codes and status transitions compared. Intended differences: docs/RPC.md.
@Suite("aria2 compatibility (real aria2c side by side)", .serialized)
struct Aria2CompatibilityTests {
    /// Keys aria2 adds that DownloadKit does not have (docs/RPC.md): the piece bitfield.
    static let aria2Only: Set<String> = ["bitfield"]

    struct Side {
        let name: String
        let port: Int
        var gids: [String: String] = [:]
    }

    /// Sends `method` to both, with params built per side (GIDs differ), returning (aria2, ours).
    func both(
        _ sides: [Side], _ method: String, token: Bool = true, _ params: (Side) -> [JSONValue] = { _ in [] }
    ) async throws -> (JSONValue, JSONValue) {
        var answers: [JSONValue] = []
        for side in sides {
            let all = (token ? [JSONValue.string("token:s3")] : []) + params(side)
            answers.append(try await rpcPost(port: side.port, rpcCall(method, all)))
        }
        return (answers[0], answers[1])
    }

    func expectSameShape(_ pair: (JSONValue, JSONValue), _ what: String, sourceLocation: SourceLocation = #_sourceLocation) {
        #expect(shape(pair.0, ignoring: Self.aria2Only) == shape(pair.1, ignoring: Self.aria2Only), "\(what): aria2 \(pair.0.serialized) vs ours \(pair.1.serialized)", sourceLocation: sourceLocation)
    }

    /// Our option keys are aria2 option names, every value a string.
    func expectOptionSubset(_ pair: (JSONValue, JSONValue), _ what: String) {
        let theirs = pair.0.objectValue?["result"]?.objectValue ?? [:]
        let ours = pair.1.objectValue?["result"]?.objectValue ?? [:]
        #expect(!ours.isEmpty && !theirs.isEmpty, "\(what)")
        for (key, value) in ours {
            #expect(theirs[key] != nil, "\(what): aria2 has no option \(key)")
            #expect(value.stringValue != nil, "\(what): \(key) is not a string")
        }
    }

    func result(_ value: JSONValue) -> JSONValue? { value.objectValue?["result"] }
    func status(_ side: Side, _ gid: String) async throws -> String? {
        let answer = try await rpcPost(port: side.port, rpcCall("aria2.tellStatus", [.string("token:s3"), .string(gid), .array([.string("status")])]))
        return result(answer)?.objectValue?["status"]?.stringValue
    }

    /// Polls both sides until `gid`'s status is one of `wanted` (bounded).
    func waitFor(_ sides: [Side], _ key: String, _ wanted: Set<String>) async throws {
        for side in sides {
            var last: String?
            for _ in 0..<400 {
                last = try await status(side, side.gids[key]!)
                if let last, wanted.contains(last) || last == "error" { break }
                try await Task.sleep(nanoseconds: 25_000_000)
            }
            var why = ""
            if last == "error", !wanted.contains("error") {
                // The side's own words for it, so that a failure here says what went wrong.
                let answer = try await rpcPost(
                    port: side.port,
                    rpcCall("aria2.tellStatus", [.string("token:s3"), .string(side.gids[key]!), .array([.string("errorCode"), .string("errorMessage")])]))
                why = " (\(result(answer)?.serialized ?? answer.serialized))"
            }
            #expect(last.map(wanted.contains) == true, "\(side.name) \(key): \(last ?? "nil")\(why), wanted \(wanted)")
        }
    }

    @Test func everyMethodAnswersInAria2sShapes() async throws {
        try await sideBySide { sides, origin, _, _ in try await exercise(&sides, origin: origin) }
    }

    private func exercise(_ sides: inout [Side], origin: FaultOrigin) async throws {
        // Version, session, method lists.
        expectSameShape(try await both(sides, "aria2.getVersion"), "getVersion")
        expectSameShape(try await both(sides, "aria2.getSessionInfo"), "getSessionInfo")
        let methods = try await both(sides, "system.listMethods", token: false)
        let theirMethods = Set(result(methods.0)?.arrayValue?.compactMap(\.stringValue) ?? [])
        let ourMethods = Set(result(methods.1)?.arrayValue?.compactMap(\.stringValue) ?? [])
        #expect(ourMethods.isSubset(of: theirMethods) && ourMethods.count >= 30, "\(ourMethods.subtracting(theirMethods))")
        let notifications = try await both(sides, "system.listNotifications", token: false)
        #expect(notifications.0 == notifications.1)

        // Errors: same codes and messages.
        let unauthorized = try await both(sides, "aria2.getVersion", token: false) { _ in [.string("token:wrong")] }
        #expect(unauthorized.0 == unauthorized.1 && unauthorized.0.objectValue?["error"]?.objectValue?["message"] == .string("Unauthorized"))
        let missingToken = try await both(sides, "aria2.getGlobalStat", token: false)
        #expect(missingToken.0 == missingToken.1)
        let unknown = try await both(sides, "aria2.noSuchThing")
        #expect(unknown.0 == unknown.1)
        let invalidGID = try await both(sides, "aria2.tellStatus") { _ in [.string("zzz")] }
        #expect(invalidGID.0 == invalidGID.1)
        let unknownGID = try await both(sides, "aria2.tellStatus") { _ in [.string("00000000000000ff")] }
        #expect(unknownGID.0 == unknownGID.1)
        let wrongType = try await both(sides, "aria2.addUri") { _ in [.string("not-an-array")] }
        #expect(wrongType.0 == wrongType.1)
        let badOption = try await both(sides, "aria2.addUri") { _ in [.array([.string(origin.url("/small.bin"))]), .object(["max-download-limit": .string("zz")])] }
        #expect(badOption.0 == badOption.1)
        for body in ["{bad", #"{"id":1,"method":5}"#] {
            var parsed: [JSONValue] = []
            for side in sides { parsed.append(try await rpcPost(port: side.port, body)) }
            #expect(parsed[0] == parsed[1], "\(body)")
        }
        for method in ["aria2.addTorrent", "aria2.addMetalink"] {
            let refused = try await both(sides, method) { _ in [.string("AAAA")] }
            #expect(refused.0.objectValue?["error"]?.objectValue?["code"] == .int(1) && refused.1.objectValue?["error"]?.objectValue?["code"] == .int(1))
        }

        // One running, one waiting behind it (max-concurrent-downloads 1).
        let limit = try await both(sides, "aria2.changeGlobalOption") { _ in [.object(["max-concurrent-downloads": .string("1")])] }
        #expect(limit.0 == limit.1)
        for key in ["slow-a", "slow-b"] {
            for index in sides.indices {
                let added = try await rpcPost(port: sides[index].port, rpcCall("aria2.addUri", [.string("token:s3"), .array([.string(origin.url("/\(key).bin"))]), .object(["header": .array([.string("X-Test: 1")])])]))
                let gid = try #require(result(added)?.stringValue, "\(sides[index].name): \(added.serialized)")
                #expect(Aria2GID.isValid(gid))
                sides[index].gids[key] = gid
            }
        }
        try await waitFor(sides, "slow-a", ["active"])
        try await waitFor(sides, "slow-b", ["waiting"])
        expectSameShape(try await both(sides, "aria2.tellStatus") { [.string($0.gids["slow-a"]!)] }, "tellStatus active")
        let filtered = try await both(sides, "aria2.tellStatus") { [.string($0.gids["slow-a"]!), .array([.string("gid"), .string("status"), .string("totalLength")])] }
        expectSameShape(filtered, "tellStatus keys")
        #expect(result(filtered.1)?.objectValue?.keys.sorted() == ["gid", "status", "totalLength"])
        expectSameShape(try await both(sides, "aria2.tellActive"), "tellActive")
        expectSameShape(try await both(sides, "aria2.tellActive") { _ in [.array([.string("gid")])] }, "tellActive keys")
        expectSameShape(try await both(sides, "aria2.tellWaiting") { _ in [.int(0), .int(10)] }, "tellWaiting")
        expectSameShape(try await both(sides, "aria2.getUris") { [.string($0.gids["slow-a"]!)] }, "getUris")
        expectSameShape(try await both(sides, "aria2.getFiles") { [.string($0.gids["slow-a"]!)] }, "getFiles")
        expectSameShape(try await both(sides, "aria2.getServers") { [.string($0.gids["slow-a"]!)] }, "getServers")
        expectSameShape(try await both(sides, "aria2.getPeers") { [.string($0.gids["slow-a"]!)] }, "getPeers")
        expectSameShape(try await both(sides, "aria2.getGlobalStat"), "getGlobalStat")
        expectSameShape(try await both(sides, "aria2.changePosition") { [.string($0.gids["slow-b"]!), .int(0), .string("POS_SET")] }, "changePosition")
        let badHow = try await both(sides, "aria2.changePosition") { [.string($0.gids["slow-b"]!), .int(0), .string("POS_BAD")] }
        #expect(badHow.0 == badHow.1)
        expectOptionSubset(try await both(sides, "aria2.getOption") { [.string($0.gids["slow-a"]!)] }, "getOption")
        let header = try await both(sides, "aria2.getOption") { [.string($0.gids["slow-a"]!)] }
        #expect(result(header.0)?.objectValue?["header"] == result(header.1)?.objectValue?["header"])
        expectOptionSubset(try await both(sides, "aria2.getGlobalOption"), "getGlobalOption")
        let changed = try await both(sides, "aria2.changeOption") { [.string($0.gids["slow-a"]!), .object(["max-download-limit": .string("100K")])] }
        #expect(changed.0 == changed.1)
        let limitNow = try await both(sides, "aria2.getOption") { [.string($0.gids["slow-a"]!)] }
        #expect(result(limitNow.0)?.objectValue?["max-download-limit"] == result(limitNow.1)?.objectValue?["max-download-limit"])
        let overall = try await both(sides, "aria2.changeGlobalOption") { _ in [.object(["max-overall-download-limit": .string("1M")])] }
        #expect(overall.0 == overall.1)

        // Pause, unpause, force variants, all.
        expectSameShape(try await both(sides, "aria2.pause") { [.string($0.gids["slow-a"]!)] }, "pause")
        try await waitFor(sides, "slow-a", ["paused"])
        let again = try await both(sides, "aria2.unpause") { [.string($0.gids["slow-b"]!)] }
        #expect(shape(again.0) == shape(again.1), "unpause of a non-paused task: \(again)")
        expectSameShape(try await both(sides, "aria2.unpause") { [.string($0.gids["slow-a"]!)] }, "unpause")
        try await waitFor(sides, "slow-a", ["waiting", "active"])
        expectSameShape(try await both(sides, "aria2.forcePause") { [.string($0.gids["slow-a"]!)] }, "forcePause")
        try await waitFor(sides, "slow-a", ["paused"])
        expectSameShape(try await both(sides, "aria2.pauseAll"), "pauseAll")
        try await waitFor(sides, "slow-b", ["paused"])
        expectSameShape(try await both(sides, "aria2.unpauseAll"), "unpauseAll")
        try await waitFor(sides, "slow-b", ["waiting", "active"])

        // Remove → removed, in tellStopped; removeDownloadResult; then unknown.
        expectSameShape(try await both(sides, "aria2.remove") { [.string($0.gids["slow-a"]!)] }, "remove")
        expectSameShape(try await both(sides, "aria2.forceRemove") { [.string($0.gids["slow-b"]!)] }, "forceRemove")
        // aria2 forgets a download removed while waiting; DownloadKit keeps it as `removed` (docs/RPC.md).
        try await waitFor([sides[1]], "slow-a", ["removed"])
        try await waitFor(sides, "slow-b", ["removed"])
        expectSameShape(try await both(sides, "aria2.tellStopped") { _ in [.int(0), .int(10)] }, "tellStopped removed")
        let notActive = try await both(sides, "aria2.pause") { [.string($0.gids["slow-b"]!)] }
        #expect(shape(notActive.0) == shape(notActive.1))
        expectSameShape(try await both(sides, "aria2.removeDownloadResult") { [.string($0.gids["slow-b"]!)] }, "removeDownloadResult")
        let gone = try await both(sides, "aria2.tellStatus") { [.string($0.gids["slow-b"]!)] }
        #expect(gone.0.objectValue?["error"] != nil && gone.1.objectValue?["error"] != nil)

        // A complete download, then purge.
        _ = try await both(sides, "aria2.changeGlobalOption") { _ in [.object(["max-overall-download-limit": .string("0")])] }
        for index in sides.indices {
            let added = try await rpcPost(port: sides[index].port, rpcCall("aria2.addUri", [.string("token:s3"), .array([.string(origin.url("/small.bin"))]), .object(["out": .string("small-\(index).bin")])]))
            sides[index].gids["small"] = try #require(result(added)?.stringValue)
        }
        try await waitFor(sides, "small", ["complete"])
        expectSameShape(try await both(sides, "aria2.tellStatus") { [.string($0.gids["small"]!)] }, "tellStatus complete")
        expectSameShape(try await both(sides, "aria2.tellStopped") { _ in [.int(-1), .int(1)] }, "tellStopped from the end")
        expectSameShape(try await both(sides, "aria2.getFiles") { [.string($0.gids["small"]!)] }, "getFiles complete")

        // multicall, batch, save, purge.
        expectSameShape(try await both(sides, "system.multicall", token: false) { side in
            [.array([
                .object(["methodName": .string("aria2.getGlobalStat"), "params": .array([.string("token:s3")])]),
                .object(["methodName": .string("aria2.tellStatus"), "params": .array([.string("token:s3"), .string("zz")])]),
            ])]
        }, "multicall")
        var batches: [JSONValue] = []
        for side in sides {
            batches.append(try await rpcPost(port: side.port, "[" + rpcCall("aria2.getGlobalStat", [.string("token:s3")]) + "," + rpcCall("nope", []) + "]"))
        }
        #expect(shape(batches[0]) == shape(batches[1]))
        expectSameShape(try await both(sides, "aria2.saveSession"), "saveSession")
        expectSameShape(try await both(sides, "aria2.purgeDownloadResult"), "purgeDownloadResult")
        let empty = try await both(sides, "aria2.tellStopped") { _ in [.int(0), .int(10)] }
        #expect(result(empty.0) == .array([]) && result(empty.1) == .array([]))
    }

    @Test func hugeAndDeepRequestsGetErrorsAndTheServerKeepsServing() async throws {
        let scratch = try ScratchDirectory()
        let ours = try await DownloadKitRPCPeer(directory: scratch.path, secret: nil)
        let huge = #"{"id":1,"method":"aria2.getVersion","params":[""# + String(repeating: "x", count: 3 << 20) + #""]}"#
        let path = scratch.file("huge.json")
        try huge.write(toFile: path, atomically: false, encoding: .utf8)
        let port = ours.port
        let answer = try await offloaded {
            try ProcessRunner.run("/usr/bin/curl", ["-s", "--max-time", "30", "--data-binary", "@" + path, "http://127.0.0.1:\(port)/jsonrpc"])
        }
        let tooLarge = try? JSONDecoder().decode(JSONValue.self, from: Data(answer.output.utf8))
        #expect(tooLarge?.objectValue?["error"]?.objectValue?["code"] == .int(-32600), "\(answer.output.prefix(200))")
        let deep = try await rpcPost(port: port, String(repeating: "[", count: 5000) + String(repeating: "]", count: 5000))
        #expect(deep.objectValue?["error"]?.objectValue?["code"] == .int(-32600))
        let version = try await rpcPost(port: port, rpcCall("aria2.getVersion", []))
        #expect(version.objectValue?["result"]?.objectValue?["version"] == .string(DownloadKitVersion.string))
        await ours.stop()
    }
}
