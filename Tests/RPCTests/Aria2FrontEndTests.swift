import DownloadKit
import DownloadKitRPC
import Foundation
import Testing
import TestOrigin

/// What aria2 front ends saw differ from real aria2c (issue #48, its last bullet), each checked side by
/// side against a real `aria2c --enable-rpc`: HTTP statuses of errors, the path of a `dir`-only download,
/// a removed download's bytes, `errorCode` and path, no `onDownloadStop` for a waiting or paused one,
/// every stopped download listed, `changeUri`, `shutdown`/`forceShutdown`.
extension Aria2CompatibilityTests {
    /// Both servers with the secret `s3` over one origin; `body` runs with the two sides (aria2 first).
    func sideBySide(
        _ body: (inout [Side], FaultOrigin, ScratchDirectory, DownloadKitRPCPeer) async throws -> Void
    ) async throws {
        let scratch = try ScratchDirectory()
        let origin = try FaultOrigin()
        defer { origin.shutdown() }
        origin.serve("/slow-a.bin", .resource(Resource(size: 8 << 20, seed: 3, bytesPerSecond: 200_000)))
        origin.serve("/slow-b.bin", .resource(Resource(size: 8 << 20, seed: 4, bytesPerSecond: 200_000)))
        origin.serve("/small.bin", .resource(Resource(size: 200_000, seed: 5)))
        origin.serve("/other.bin", .resource(Resource(size: 300_000, seed: 6)))
        let aria2 = try Aria2Process(directory: scratch.path, secret: "s3")
        defer { aria2.stop() }
        try await offloaded { try aria2.waitUntilListening() }
        let ours = try await DownloadKitRPCPeer(directory: scratch.path, secret: "s3")
        var sides = [Side(name: "aria2c", port: aria2.port), Side(name: "downloadkit", port: ours.port)]
        do {
            try await body(&sides, origin, scratch, ours)
        } catch {
            await ours.stop()
            throw error
        }
        await ours.stop()
    }

    /// Adds `uri` on every side under `key`.
    func add(_ sides: inout [Side], _ key: String, _ uri: String, _ options: (Int) -> [String: JSONValue] = { _ in [:] }) async throws {
        for index in sides.indices {
            let added = try await rpcPost(
                port: sides[index].port,
                rpcCall("aria2.addUri", [.string("token:s3"), .array([.string(uri)]), .object(options(index))]))
            sides[index].gids[key] = try #require(result(added)?.stringValue, "\(sides[index].name): \(added.serialized)")
        }
    }

    func field(_ side: Side, _ gid: String, _ key: String) async throws -> JSONValue? {
        let answer = try await rpcPost(port: side.port, rpcCall("aria2.tellStatus", [.string("token:s3"), .string(gid)]))
        return result(answer)?.objectValue?[key]
    }

    func filePath(_ side: Side, _ gid: String) async throws -> String? {
        try await field(side, gid, "files")?.arrayValue?.first?.objectValue?["path"]?.stringValue
    }

    /// Waits (bounded) until no side accepts connections any more.
    func expectStopsListening(_ sides: [Side], after method: String) async throws {
        for side in sides {
            var open = true
            for _ in 0..<200 {
                open = FreePort.acceptsConnections(port: side.port)
                if !open { break }
                try await Task.sleep(nanoseconds: 25_000_000)
            }
            #expect(!open, "\(side.name) still listens after \(method)")
        }
    }

    // MARK: - HTTP statuses

    @Test func errorsGetAria2sHTTPStatuses() async throws {
        try await sideBySide { sides, _, _, _ in
            let bodies = [
                rpcCall("aria2.getVersion", [.string("token:wrong")]),  // Unauthorized: 400
                rpcCall("aria2.getVersion", []),  // no token: 400
                rpcCall("aria2.noSuchMethod", [.string("token:s3")]),  // 400
                rpcCall("aria2.tellStatus", [.string("token:s3"), .string("00000000000000ff")]),  // unknown GID: 400
                rpcCall("aria2.tellStatus", [.string("token:s3"), .string("zz")]),  // invalid GID: 400
                rpcCall("aria2.shutdown", [.string("token:wrong")]),  // the new methods behind the same gate
                #"{"id":1,"method":5}"#,  // -32600: 400
                "{bad",  // -32700: 500
                rpcCall("aria2.getVersion", [.string("token:s3")]),  // 200
                "[" + rpcCall("aria2.noSuchMethod", [.string("token:s3")]) + "]",  // a batch: 200
                rpcCall("system.multicall", [.array([.object(["methodName": .string("aria2.noSuchMethod")])])]),  // 200
            ]
            for body in bodies {
                var answers: [RawAnswer] = []
                for side in sides { answers.append(try await rawRequest(port: side.port, headers: ["Content-Type: application/json"], body: body)) }
                #expect(answers[0].status == answers[1].status, "\(body): aria2 \(answers[0].status) vs ours \(answers[1].status)")
                #expect(answers[0].json == answers[1].json || body.contains("getVersion\",\"params\":[\"token:s3"), "\(body)")
                #expect([200, 400, 500].contains(answers[1].status))
            }
        }
    }

    // MARK: - Paths, removed downloads

    @Test func aDirOnlyDownloadShowsItsPathAndARemovedOneKeepsBytesCodeAndPath() async throws {
        try await sideBySide { sides, origin, scratch, _ in
            let dirs = [scratch.path + "/aria2/sub", scratch.path + "/dk/sub"]
            // Before the first response: aria2 shows "" (the name is not known yet), as we do.
            try await add(&sides, "paused", origin.url("/slow-b.bin")) { ["dir": .string(dirs[$0]), "pause": .string("true")] }
            for side in sides {
                #expect(try await filePath(side, side.gids["paused"]!) == "", "\(side.name)")
            }
            try await add(&sides, "slow", origin.url("/slow-a.bin")) { ["dir": .string(dirs[$0])] }
            try await waitFor(sides, "slow", ["active"])
            for (index, side) in sides.enumerated() {
                var path: String?
                var bytes: Int64 = 0
                for _ in 0..<200 {
                    path = try await filePath(side, side.gids["slow"]!)
                    bytes = try await field(side, side.gids["slow"]!, "completedLength")?.stringValue.flatMap { Int64($0) } ?? 0
                    if path == dirs[index] + "/slow-a.bin", bytes > 0 { break }
                    try await Task.sleep(nanoseconds: 25_000_000)
                }
                #expect(path == dirs[index] + "/slow-a.bin", "\(side.name) active: \(path ?? "nil")")
            }
            expectSameShape(try await both(sides, "aria2.remove") { [.string($0.gids["slow"]!)] }, "remove active")
            try await waitFor(sides, "slow", ["removed"])
            for (index, side) in sides.enumerated() {
                let gid = side.gids["slow"]!
                #expect(try await field(side, gid, "errorCode") == .string("31"), "\(side.name)")
                let bytes = try await field(side, gid, "completedLength")?.stringValue.flatMap { Int64($0) } ?? 0
                #expect(bytes > 0, "\(side.name): completedLength \(bytes) after remove")
                #expect(try await filePath(side, gid) == dirs[index] + "/slow-a.bin", "\(side.name) removed")
            }
        }
    }

    // MARK: - Notifications

    /// Over one WebSocket: a waiting and a paused download are removed (aria2: no notification), then an
    /// active one (`onDownloadStop`). Prints the GIDs and those that got `onDownloadStop`.
    static let notificationScript = #"""
        import json, sys, time, websocket
        port, slow, other = int(sys.argv[1]), sys.argv[2], sys.argv[3]
        ws = websocket.create_connection(f"ws://127.0.0.1:{port}/jsonrpc", timeout=10)
        notes, counter = [], [0]
        def note(message):
            if "method" in message:
                notes.append((message["method"], message["params"][0]["gid"]))
                return True
            return False
        def call(method, *params):
            counter[0] += 1
            ws.send(json.dumps({"jsonrpc": "2.0", "id": counter[0], "method": method, "params": ["token:s3", *params]}))
            while True:
                message = json.loads(ws.recv())
                if not note(message) and message.get("id") == counter[0]:
                    return message.get("result", message.get("error"))
        call("aria2.changeGlobalOption", {"max-concurrent-downloads": "1"})
        active = call("aria2.addUri", [slow])
        for _ in range(400):
            if call("aria2.tellStatus", active, ["status"])["status"] == "active":
                break
            time.sleep(0.025)
        waiting = call("aria2.addUri", [other])
        paused = call("aria2.addUri", [other], {"pause": "true", "out": "paused.bin"})
        call("aria2.remove", waiting)
        call("aria2.remove", paused)
        call("aria2.remove", active)
        ws.settimeout(0.2)
        end = time.time() + 1.5
        while time.time() < end:
            try:
                note(json.loads(ws.recv()))
            except Exception:
                pass
        stops = sorted(gid for method, gid in notes if method == "aria2.onDownloadStop")
        print("RESULT " + json.dumps({"active": active, "waiting": waiting, "paused": paused, "stops": stops}))
        """#

    @Test func removingAWaitingOrPausedDownloadSendsNoStopNotification() async throws {
        try await sideBySide { sides, origin, scratch, _ in
            try Self.notificationScript.write(toFile: scratch.file("notes.py"), atomically: false, encoding: .utf8)
            let python = try #require(ProcessRunner.findExecutable("python3"))
            for side in sides {
                let port = side.port
                let run = try await offloaded {
                    try ProcessRunner.run(python, [scratch.file("notes.py"), String(port), origin.url("/slow-b.bin"), origin.url("/other.bin")])
                }
                let line = try #require(run.output.split(separator: "\n").first { $0.hasPrefix("RESULT ") }, "\(side.name): \(run.output)")
                let value = try JSONDecoder().decode(JSONValue.self, from: Data(line.dropFirst("RESULT ".count).utf8))
                let stops = value.objectValue?["stops"]?.arrayValue ?? []
                #expect(stops == [value.objectValue?["active"] ?? .null], "\(side.name): \(line)")
            }
        }
    }

    // MARK: - tellStopped

    @Test func twoStoppedDownloadsOfOneURLAreBothListed() async throws {
        try await sideBySide { sides, origin, _, _ in
            try await add(&sides, "first", origin.url("/small.bin")) { ["out": .string("first-\($0).bin")] }
            try await waitFor(sides, "first", ["complete"])
            try await add(&sides, "second", origin.url("/small.bin")) { ["out": .string("second-\($0).bin")] }
            try await waitFor(sides, "second", ["complete"])
            let stopped = try await both(sides, "aria2.tellStopped") { _ in [.int(0), .int(10), .array([.string("gid")])] }
            let theirs = result(stopped.0)?.arrayValue ?? []
            let ours = result(stopped.1)?.arrayValue ?? []
            #expect(theirs.count == 2 && ours.count == 2, "aria2 \(stopped.0.serialized) vs ours \(stopped.1.serialized)")
            #expect(sides[1].gids["first"] != sides[1].gids["second"])
        }
    }

    /// A new download of a URL beside its removed one (same `dir`, so the same working files here): removing
    /// the old result must not delete the new download's partial data; both end right.
    @Test func removingAnOldResultKeepsTheNewDownloadOfItsURL() async throws {
        try await sideBySide { sides, origin, scratch, _ in
            origin.serve("/again.bin", .resource(Resource(size: 1 << 20, seed: 8, bytesPerSecond: 400_000)))
            let dirs = [scratch.path + "/aria2/again", scratch.path + "/dk/again"]
            try await add(&sides, "old", origin.url("/again.bin")) { ["dir": .string(dirs[$0])] }
            try await waitFor(sides, "old", ["active"])
            _ = try await both(sides, "aria2.remove") { [.string($0.gids["old"]!)] }
            try await waitFor(sides, "old", ["removed"])
            try await add(&sides, "new", origin.url("/again.bin")) { ["dir": .string(dirs[$0])] }
            #expect(sides[1].gids["old"] != sides[1].gids["new"])
            try await waitFor(sides, "new", ["active"])
            try await Task.sleep(for: .milliseconds(300))
            let removed = try await both(sides, "aria2.removeDownloadResult") { [.string($0.gids["old"]!)] }
            #expect(removed.0 == removed.1, "aria2 \(removed.0.serialized) vs ours \(removed.1.serialized)")
            try await waitFor(sides, "new", ["complete"])
            #expect(fileMatchesPattern(dirs[1] + "/again.bin", size: 1 << 20, seed: 8))
        }
    }

    // MARK: - changeUri

    @Test func changeUriReplacesTheSourceOfAPausedDownload() async throws {
        try await sideBySide { sides, origin, scratch, _ in
            try await add(&sides, "paused", origin.url("/slow-a.bin")) { ["pause": .string("true"), "out": .string("changed-\($0).bin")] }
            func change(_ params: @escaping (Side) -> [JSONValue]) async throws -> (JSONValue, JSONValue) {
                try await both(sides, "aria2.changeUri") { [.string($0.gids["paused"]!)] + params($0) }
            }
            let uri = JSONValue.string(origin.url("/slow-a.bin"))
            let other = JSONValue.string(origin.url("/other.bin"))
            // aria2's errors: the same objects.
            for params: [JSONValue] in [
                [.int(0), .array([]), .array([other])], [.int(-1), .array([]), .array([other])],
                [.int(2), .array([]), .array([other])], [.int(1), .array([uri]), .array([other]), .int(-1)],
                [.string("1"), .array([]), .array([])],
            ] {
                let answer = try await change { _ in params }
                #expect(answer.0 == answer.1, "\(params): aria2 \(answer.0.serialized) vs ours \(answer.1.serialized)")
            }
            // Huge numbers: typed errors, and the server goes on.
            for params: [JSONValue] in [
                [.double(1e30), .array([]), .array([other])], [.int(1), .array([uri]), .array([other]), .double(-1e30)],
                [.int(Int64.max), .array([]), .array([other])],
            ] {
                let answer = try await rpcPost(port: sides[1].port, rpcCall("aria2.changeUri", [.string("token:s3"), .string(sides[1].gids["paused"]!)] + params))
                #expect(answer.objectValue?["error"]?.objectValue?["code"] == .int(1), "\(params): \(answer.serialized)")
            }
            // Nothing to delete, nothing added: [0, 0] on both.
            let nothing = try await change { _ in [.int(1), .array([.string("http://127.0.0.1:1/none")]), .array([])] }
            #expect(nothing.0 == nothing.1, "aria2 \(nothing.0.serialized) vs ours \(nothing.1.serialized)")
            // Replace the one URI: [1, 1]; getUris shows the new one; the download then completes from it.
            let replaced = try await change { _ in [.int(1), .array([uri]), .array([other])] }
            #expect(replaced.0 == replaced.1 && result(replaced.1) == .array([.int(1), .int(1)]), "aria2 \(replaced.0.serialized) vs ours \(replaced.1.serialized)")
            let uris = try await both(sides, "aria2.getUris") { [.string($0.gids["paused"]!)] }
            #expect(uris.0 == uris.1, "aria2 \(uris.0.serialized) vs ours \(uris.1.serialized)")
            _ = try await both(sides, "aria2.unpause") { [.string($0.gids["paused"]!)] }
            try await waitFor(sides, "paused", ["complete"])
            #expect(fileMatchesPattern(scratch.path + "/aria2/changed-0.bin", size: 300_000, seed: 6))
            #expect(fileMatchesPattern(scratch.path + "/dk/changed-1.bin", size: 300_000, seed: 6))
            // A stopped download: aria2's error.
            let stopped = try await change { _ in [.int(1), .array([]), .array([uri])] }
            for (side, answer) in zip(sides, [stopped.0, stopped.1]) {
                #expect(errorMessage(answer) == "Cannot remove URIs from GID#\(side.gids["paused"]!)", "\(side.name): \(answer.serialized)")
            }
        }
    }

    // MARK: - several URIs (mirrors)

    /// `addUri` with two URIs of one resource (the same bytes, length and Last-Modified under two paths):
    /// `getUris` lists both as aria2 does, both servers complete the file, and ours fetched bytes from
    /// both paths (before, ours used the first URI only and `getUris` listed one).
    @Test func addUriWithTwoURIsDownloadsFromBothAndListsThem() async throws {
        try await sideBySide { sides, origin, scratch, _ in
            let size: Int64 = 4 << 20
            for path in ["/m1.bin", "/m2.bin"] {
                origin.serve(path, .resource(Resource(size: size, seed: 11, bytesPerSecond: 1_000_000)))
            }
            let uris: [JSONValue] = [.string(origin.url("/m1.bin")), .string(origin.url("/m2.bin"))]
            for index in sides.indices {
                // aria2 splits a file only in pieces of `min-split-size` (default 20M); ours uses one
                // connection per source by default. Unknown options are ignored by ours.
                let options: [String: JSONValue] = [
                    "out": .string("m-\(index).bin"), "pause": .string("true"), "split": .string("2"),
                    "min-split-size": .string("1M"),
                ]
                let added = try await rpcPost(
                    port: sides[index].port,
                    rpcCall("aria2.addUri", [.string("token:s3"), .array(uris), .object(options)]))
                sides[index].gids["m"] = try #require(result(added)?.stringValue, "\(sides[index].name): \(added.serialized)")
            }
            let waiting = try await both(sides, "aria2.getUris") { [.string($0.gids["m"]!)] }
            #expect(waiting.0 == waiting.1, "aria2 \(waiting.0.serialized) vs ours \(waiting.1.serialized)")
            #expect(result(waiting.1)?.arrayValue?.count == 2, "\(waiting.1.serialized)")
            _ = try await both(sides, "aria2.unpause") { [.string($0.gids["m"]!)] }
            try await waitFor(sides, "m", ["complete"])
            #expect(fileMatchesPattern(scratch.path + "/aria2/m-0.bin", size: size, seed: 11))
            #expect(fileMatchesPattern(scratch.path + "/dk/m-1.bin", size: size, seed: 11))
            // aria2 forgets a completed download's URIs ("No URI data is available", docs/RPC.md); ours
            // lists both, used.
            let used = try await rpcPost(port: sides[1].port, rpcCall("aria2.getUris", [.string("token:s3"), .string(sides[1].gids["m"]!)]))
            let usedURIs = result(used)?.arrayValue?.compactMap { $0.objectValue }
            #expect(usedURIs?.map { $0["uri"] } == uris && usedURIs?.allSatisfy { $0["status"] == .string("used") } == true, "\(used.serialized)")
            // Our requests (aria2 sends its own User-Agent): ranges of the file from both paths.
            for path in ["/m1.bin", "/m2.bin"] {
                let ours = origin.requests(path).filter {
                    $0.method == "GET" && !($0.header("User-Agent") ?? "").hasPrefix("aria2")
                        && $0.header("Range") != nil
                }
                #expect(!ours.isEmpty, "DownloadKit sent no range request to \(path)")
            }
        }
    }

    /// `changeUri` on an active download (aria2 applies it to the running download; before, ours refused
    /// with "pause it first"): both answer [0, 1] and list the same URIs; ours restarts the transfer from its
    /// bytes with the added mirror, which then serves ranges; both files end right.
    @Test func changeUriAddsAMirrorToAnActiveDownload() async throws {
        try await sideBySide { sides, origin, scratch, _ in
            let size: Int64 = 6 << 20
            for path in ["/a1.bin", "/a2.bin"] {
                origin.serve(path, .resource(Resource(size: size, seed: 12, bytesPerSecond: 1_000_000)))
            }
            try await add(&sides, "active", origin.url("/a1.bin")) {
                ["out": .string("active-\($0).bin"), "split": .string("2"), "min-split-size": .string("1M")]
            }
            try await waitFor(sides, "active", ["active"])
            let mirror = JSONValue.string(origin.url("/a2.bin"))
            let changed = try await both(sides, "aria2.changeUri") { [.string($0.gids["active"]!), .int(1), .array([]), .array([mirror])] }
            #expect(changed.0 == changed.1 && result(changed.1) == .array([.int(0), .int(1)]), "aria2 \(changed.0.serialized) vs ours \(changed.1.serialized)")
            let listed = try await both(sides, "aria2.getUris") { [.string($0.gids["active"]!)] }
            // aria2 lists the first URI twice here (it repeats a URI to open `split` connections to it); both
            // list the added mirror, ours each source once.
            let uris = [listed.0, listed.1].map { result($0)?.arrayValue?.compactMap { $0.objectValue?["uri"] } ?? [] }
            #expect(uris[0].contains(mirror) && uris[1] == [.string(origin.url("/a1.bin")), mirror], "aria2 \(listed.0.serialized) vs ours \(listed.1.serialized)")
            try await waitFor(sides, "active", ["complete"])
            #expect(fileMatchesPattern(scratch.path + "/aria2/active-0.bin", size: size, seed: 12))
            #expect(fileMatchesPattern(scratch.path + "/dk/active-1.bin", size: size, seed: 12))
            let ours = origin.requests("/a2.bin").filter {
                $0.method == "GET" && !($0.header("User-Agent") ?? "").hasPrefix("aria2") && $0.header("Range") != nil
            }
            #expect(!ours.isEmpty, "DownloadKit sent no range request to the mirror added mid-download")
        }
    }

    /// `changeUri` adds and deletes mirrors of a paused download, and refuses to leave it without a URI.
    @Test func changeUriAddsAndDeletesMirrors() async throws {
        try await sideBySide { sides, origin, _, _ in
            try await add(&sides, "paused", origin.url("/slow-a.bin")) { ["pause": .string("true"), "out": .string("mirrored-\($0).bin")] }
            func change(_ params: [JSONValue]) async throws -> (JSONValue, JSONValue) {
                try await both(sides, "aria2.changeUri") { [.string($0.gids["paused"]!), .int(1)] + params }
            }
            func uris() async throws -> (JSONValue, JSONValue) {
                try await both(sides, "aria2.getUris") { [.string($0.gids["paused"]!)] }
            }
            let first = JSONValue.string(origin.url("/slow-a.bin"))
            let second = JSONValue.string(origin.url("/slow-b.bin"))
            let third = JSONValue.string(origin.url("/small.bin"))
            // Two mirrors added (one at the front): [0, 2], the lists the same.
            let added = try await change([.array([]), .array([second])])
            #expect(added.0 == added.1, "aria2 \(added.0.serialized) vs ours \(added.1.serialized)")
            let front = try await change([.array([]), .array([third]), .int(0)])
            #expect(front.0 == front.1 && result(front.1) == .array([.int(0), .int(1)]), "aria2 \(front.0.serialized) vs ours \(front.1.serialized)")
            var listed = try await uris()
            #expect(listed.0 == listed.1 && result(listed.1)?.arrayValue?.count == 3, "aria2 \(listed.0.serialized) vs ours \(listed.1.serialized)")
            // Deleting two: [2, 0], one left.
            let deleted = try await change([.array([third, first]), .array([])])
            #expect(deleted.0 == deleted.1 && result(deleted.1) == .array([.int(2), .int(0)]), "aria2 \(deleted.0.serialized) vs ours \(deleted.1.serialized)")
            listed = try await uris()
            #expect(listed.0 == listed.1 && result(listed.1)?.arrayValue?.count == 1, "aria2 \(listed.0.serialized) vs ours \(listed.1.serialized)")
            // Deleting the last one: ours refuses (a download needs a source) and keeps it.
            let last = try await rpcPost(
                port: sides[1].port,
                rpcCall("aria2.changeUri", [.string("token:s3"), .string(sides[1].gids["paused"]!), .int(1), .array([second]), .array([])]))
            #expect(errorMessage(last)?.contains("no URI left") == true, "\(last.serialized)")
            let kept = try await rpcPost(port: sides[1].port, rpcCall("aria2.getUris", [.string("token:s3"), .string(sides[1].gids["paused"]!)]))
            #expect(result(kept) == result(listed.1), "\(kept.serialized)")
        }
    }

    // MARK: - shutdown

    @Test func shutdownNeedsTheTokenAnswersOKAndStopsTheListener() async throws {
        try await sideBySide { sides, _, _, ours in
            for method in ["aria2.shutdown", "aria2.forceShutdown"] {
                let refused = try await both(sides, method, token: false) { _ in [.string("token:wrong")] }
                #expect(refused.0 == refused.1 && errorMessage(refused.1) == "Unauthorized", "\(refused)")
            }
            #expect(FreePort.acceptsConnections(port: sides[1].port))
            let stopped = try await both(sides, "aria2.shutdown")
            #expect(stopped.0 == stopped.1 && result(stopped.1) == .string("OK"), "\(stopped)")
            try await expectStopsListening(sides, after: "aria2.shutdown")
            #expect(ours.server.stoppedOverRPC)
        }
    }

    /// A WebSocket client that sends argv[2] as one text frame, prints the answer and whether the server
    /// then closed the connection (`CLOSED`) or kept it open for 10 s (`STILL OPEN`).
    static let messageScript = #"""
        import sys, websocket
        ws = websocket.create_connection(f"ws://127.0.0.1:{int(sys.argv[1])}/jsonrpc", timeout=10)
        ws.send(sys.argv[2])
        print("RESULT " + ws.recv())
        try:
            while ws.recv():
                pass
        except websocket.WebSocketTimeoutException:
            print("STILL OPEN")
            sys.exit(0)
        except Exception:
            pass
        print("CLOSED")
        """#

    /// Sends `message` as one WebSocket text frame to `port` through the Python client above (a real client
    /// process): `RESULT <answer>`, then `CLOSED` or `STILL OPEN`.
    func webSocketExchange(port: Int, _ message: String, scratch: ScratchDirectory) async throws -> String {
        let script = scratch.file("message.py")
        try Self.messageScript.write(toFile: script, atomically: false, encoding: .utf8)
        let python = try #require(ProcessRunner.findExecutable("python3"))
        let run = try await offloaded { try ProcessRunner.run(python, [script, String(port), message]) }
        return run.output.split(separator: "\n").filter { $0.hasPrefix("RESULT ") || $0 == "CLOSED" || $0 == "STILL OPEN" }
            .joined(separator: " ")
    }

    /// `shutdown`/`forceShutdown` over a WebSocket (how AriaNg sends them): the answer, then the server
    /// closes the connection the client keeps open (`CLOSED`), within 10 s.
    @Test(arguments: ["aria2.shutdown", "aria2.forceShutdown"])
    func shutdownOverAWebSocketAnswersOKAndStops(method: String) async throws {
        try await sideBySide { sides, _, scratch, ours in
            var answers: [String] = []
            for side in sides {
                answers.append(try await webSocketExchange(port: side.port, rpcCall(method, [.string("token:s3")], id: 7), scratch: scratch))
            }
            #expect(answers[0] == answers[1] && answers[1] == #"RESULT {"id":7,"jsonrpc":"2.0","result":"OK"} CLOSED"#, "\(answers)")
            try await expectStopsListening(sides, after: method)
            #expect(ours.server.stoppedOverRPC)
        }
    }

    /// The answer of a message that asks the listener to stop reaches its caller however long the message
    /// takes after the stop was asked (here its second call's wrong token costs 1 s, longer than any fixed
    /// pause and than a forced stop's grace), and the listener stops as soon as that answer is written —
    /// well before the safety-net deadline.
    @Test(arguments: [("http", "aria2.shutdown"), ("http", "aria2.forceShutdown"), ("ws", "aria2.shutdown"), ("ws", "aria2.forceShutdown")])
    func theListenerStopsOnceTheAnswerIsWritten(transport: String, method: String) async throws {
        let scratch = try ScratchDirectory()
        let ours = try await DownloadKitRPCPeer(directory: scratch.path, secret: "s3")
        let port = ours.port
        let batch = "[" + rpcCall(method, [.string("token:s3")], id: 1) + "," + rpcCall("aria2.getVersion", [.string("token:wrong")], id: 2) + "]"
        do {
            let answer =
                transport == "http"
                ? try await rpcPost(port: port, batch).serialized : try await webSocketExchange(port: port, batch, scratch: scratch)
            let answered = ContinuousClock.now
            let expected = #"[{"id":1,"jsonrpc":"2.0","result":"OK"},{"error":{"code":1,"message":"Unauthorized"},"id":2,"jsonrpc":"2.0"}]"#
            #expect(answer == (transport == "http" ? expected : "RESULT " + expected + " CLOSED"), "\(transport) \(method): \(answer)")
            try await expectStopsListening([Side(name: "downloadkit", port: port)], after: method)
            #expect(ContinuousClock.now - answered < Aria2RPCServer.deliveryDeadline, "stopped by the safety net, not by the delivery")
            #expect(ours.server.stoppedOverRPC)
        } catch {
            await ours.stop()
            throw error
        }
        await ours.stop()
    }
}
