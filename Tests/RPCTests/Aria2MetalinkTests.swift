import DownloadKit
import DownloadKitManager
import DownloadKitRPC
import Foundation
import Testing
import TestOrigin

/// `aria2.addMetalink` (issue #48) side by side with a real `aria2c --enable-rpc`: the same base64 Metalink,
/// one GID per `<file>`, `tellStatus` in aria2's shape, each file downloaded and checked against its hash.
extension Aria2CompatibilityTests {
    /// A Metalink 4 document of `files` (name, SHA-256, URLs best first).
    static func metalink4(_ files: [(name: String, size: Int, sha256: String, urls: [String])]) -> String {
        let body = files.map { file in
            let urls = file.urls.enumerated().map { "    <url priority=\"\($0.offset + 1)\">\($0.element)</url>" }
            return """
                  <file name="\(file.name)">
                    <size>\(file.size)</size>
                    <hash type="sha-256">\(file.sha256)</hash>
                \(urls.joined(separator: "\n"))
                  </file>
                """
        }
        return """
            <?xml version="1.0" encoding="UTF-8"?>
            <metalink xmlns="urn:ietf:params:xml:ns:metalink">
            \(body.joined(separator: "\n"))
            </metalink>
            """
    }

    static func sha256(_ resource: Resource) -> String { SimpleHash.hex(SimpleHash.sha256(resource.bytes())) }

    /// Three files: one from two URLs, one from one, one whose hash is wrong. Both servers answer three GIDs,
    /// the same `tellStatus` shape and URIs; both complete the first two (ours from both URLs of the first)
    /// under `dir`, and stop the third with aria2's checksum error code 32 (before, ours refused the call).
    @Test func addMetalinkAddsOneDownloadPerFileAsAria2() async throws {
        try await sideBySide { sides, origin, scratch, _ in
            let first = Resource(size: 3 << 20, seed: 31, bytesPerSecond: 1_500_000)
            let second = Resource(size: 200_000, seed: 32)
            let third = Resource(size: 100_000, seed: 33)
            origin.serve("/ml/first-a.bin", .resource(first))
            origin.serve("/ml/first-b.bin", .resource(first))
            origin.serve("/ml/second.bin", .resource(second))
            origin.serve("/ml/third.bin", .resource(third))
            let document = Self.metalink4([
                ("first.bin", 3 << 20, Self.sha256(first), [origin.url("/ml/first-a.bin"), origin.url("/ml/first-b.bin")]),
                ("second.bin", 200_000, Self.sha256(second), [origin.url("/ml/second.bin")]),
                ("third.bin", 100_000, String(repeating: "ab", count: 32), [origin.url("/ml/third.bin")]),
            ])
            let base64 = JSONValue.string(Data(document.utf8).base64EncodedString())
            // Front ends offer a Metalink upload when getVersion lists the feature, as aria2c's does.
            let version = try await both(sides, "aria2.getVersion")
            for answer in [version.0, version.1] {
                #expect(result(answer)?.objectValue?["enabledFeatures"]?.arrayValue?.contains(.string("Metalink")) == true, "\(answer.serialized)")
            }
            let names = ["first", "second", "third"]
            for index in sides.indices {
                let options: [String: JSONValue] = [
                    "dir": .string(scratch.path + "/ml-\(index)"), "pause": .string("true"), "split": .string("2"),
                    "min-split-size": .string("1M"),
                ]
                let added = try await rpcPost(
                    port: sides[index].port, rpcCall("aria2.addMetalink", [.string("token:s3"), base64, .object(options)]))
                let gids = (result(added)?.arrayValue ?? []).compactMap { $0.stringValue }
                try #require(gids.count == 3 && gids.allSatisfy(Aria2GID.isValid), "\(sides[index].name): \(added.serialized)")
                for (name, gid) in zip(names, gids) { sides[index].gids[name] = gid }
            }
            for name in names {
                let paused = try await both(sides, "aria2.tellStatus") { [.string($0.gids[name]!)] }
                expectSameShape(paused, "tellStatus \(name), paused")
                let uris = try await both(sides, "aria2.getUris") { [.string($0.gids[name]!)] }
                #expect(uris.0 == uris.1, "\(name): aria2 \(uris.0.serialized) vs ours \(uris.1.serialized)")
                _ = try await both(sides, "aria2.unpause") { [.string($0.gids[name]!)] }
            }
            try await waitFor(sides, "first", ["complete"])
            try await waitFor(sides, "second", ["complete"])
            try await waitFor(sides, "third", ["error"])
            for index in sides.indices {
                let dir = scratch.path + "/ml-\(index)"
                #expect(fileMatchesPattern(dir + "/first.bin", size: 3 << 20, seed: 31), "\(sides[index].name)")
                #expect(fileMatchesPattern(dir + "/second.bin", size: 200_000, seed: 32), "\(sides[index].name)")
                #expect(try await filePath(sides[index], sides[index].gids["first"]!) == dir + "/first.bin")
            }
            // aria2 leaves a file that fails its hash under its name; ours keeps nothing under the name
            // (docs/RPC.md).
            #expect(!FileManager.default.fileExists(atPath: scratch.path + "/ml-1/third.bin"))
            let done = try await both(sides, "aria2.tellStatus") { [.string($0.gids["second"]!)] }
            expectSameShape(done, "tellStatus complete")
            let failed = try await both(sides, "aria2.tellStatus") { [.string($0.gids["third"]!), .array([.string("status"), .string("errorCode")])] }
            #expect(failed.0 == failed.1 && result(failed.1)?.objectValue?["errorCode"] == .string("32"), "aria2 \(failed.0.serialized) vs ours \(failed.1.serialized)")
            // Ours fetched ranges of the first file from both of its URLs.
            for path in ["/ml/first-a.bin", "/ml/first-b.bin"] {
                let ours = origin.requests(path).filter {
                    $0.method == "GET" && !($0.header("User-Agent") ?? "").hasPrefix("aria2") && $0.header("Range") != nil
                }
                #expect(!ours.isEmpty, "DownloadKit sent no range request to \(path)")
            }
        }
    }

    /// What cannot be added is refused with code 1 by both, ours naming the cause (the line and column of
    /// a malformed document, a DOCTYPE, text that is not base64, a file with no http URL), and adds nothing.
    @Test func addMetalinkRefusesWhatItCannotRead() async throws {
        try await sideBySide { sides, origin, _, ours in
            let noHTTP = """
                <?xml version="1.0" encoding="UTF-8"?>
                <metalink xmlns="urn:ietf:params:xml:ns:metalink">
                  <file name="ok.bin"><url>\(origin.url("/small.bin"))</url></file>
                  <file name="ftp.bin"><url>ftp://127.0.0.1:9/ftp.bin</url></file>
                </metalink>
                """
            // Malformed XML: both refuse it; ours names where.
            let malformed = "<metalink xmlns=\"urn:ietf:params:xml:ns:metalink\">\n  <file name=\"a\">\n  </fil>"
            let refused = try await both(sides, "aria2.addMetalink") { _ in [.string(Data(malformed.utf8).base64EncodedString())] }
            #expect(refused.0.objectValue?["error"]?.objectValue?["code"] == .int(1), "aria2: \(refused.0.serialized)")
            #expect(refused.1.objectValue?["error"]?.objectValue?["code"] == .int(1), "ours: \(refused.1.serialized)")
            #expect(errorMessage(refused.1)?.contains("at line 3, column") == true, "ours: \(refused.1.serialized)")
            // Ours only: aria2 reads DTDs (libxml2) and downloads ftp.
            let doctype = "<?xml version=\"1.0\"?>\n<!DOCTYPE x [<!ENTITY a \"b\">]>\n<metalink/>"
            for (document, cause) in [(doctype, "doctypeRefused"), (noHTTP, "'ftp.bin' has no http or https URL")] {
                let answer = try await rpcPost(
                    port: ours.port, rpcCall("aria2.addMetalink", [.string("token:s3"), .string(Data(document.utf8).base64EncodedString())]))
                #expect(answer.objectValue?["error"]?.objectValue?["code"] == .int(1), "\(answer.serialized)")
                #expect(errorMessage(answer)?.contains(cause) == true, "\(answer.serialized)")
            }
            let notBase64 = try await rpcPost(port: ours.port, rpcCall("aria2.addMetalink", [.string("token:s3"), .string("%%%not base64%%%")]))
            #expect(errorMessage(notBase64)?.contains("not base64") == true, "\(notBase64.serialized)")
            #expect(await ours.manager.allTasks().isEmpty)
        }
    }
    /// `addMetalink` of a document whose file has `<pieces>` (no whole-file hash) and two URLs, the second
    /// corrupting 16 bytes at the start of each 2 MiB segment: the manager's task verifies each piece (the
    /// plan's strongest list, `get --metalink`'s rule), so the file ends right and only the bad piece is
    /// asked again, of the good URL. Before, the task kept no piece table and completed with the corrupt
    /// bytes in place.
    @Test func addMetalinkVerifiesPiecesAndFetchesOnlyTheBadOneAgain() async throws {
        let scratch = try ScratchDirectory()
        let origin = try FaultOrigin()
        let corrupt = try FaultOrigin()
        defer {
            origin.shutdown()
            corrupt.shutdown()
        }
        let size: Int64 = 4 << 20
        let piece: Int64 = 1 << 20
        let resource = Resource(size: size, seed: 48, bytesPerSecond: 2 << 20)
        var corrupted = resource
        corrupted.faults = [0, 2 << 20].map { Int64($0) }.map { .corruptBytes($0 + 16..<$0 + 32) }
        origin.serve("/pc.bin", .resource(resource))
        corrupt.serve("/pc.bin", .resource(corrupted))
        let hashes = stride(from: Int64(0), to: size, by: Int(piece)).map {
            "      <hash>\(SimpleHash.hex(SimpleHash.sha256(resource.bytes(offset: $0, count: Int(piece)))))</hash>"
        }
        let document = """
            <?xml version="1.0" encoding="UTF-8"?>
            <metalink xmlns="urn:ietf:params:xml:ns:metalink">
              <file name="pc.bin">
                <size>\(size)</size>
                <pieces length="\(piece)" type="sha-256">
            \(hashes.joined(separator: "\n"))
                </pieces>
                <url priority="1">\(origin.url("/pc.bin"))</url>
                <url priority="2">\(corrupt.url("/pc.bin"))</url>
              </file>
            </metalink>
            """
        let ours = try await DownloadKitRPCPeer(directory: scratch.path, secret: nil)
        let options: [String: JSONValue] = [
            "dir": .string(scratch.path + "/ml"), "split": .string("2"), "max-connection-per-server": .string("1"),
        ]
        let added = try await rpcPost(
            port: ours.port,
            rpcCall("aria2.addMetalink", [.string(Data(document.utf8).base64EncodedString()), .object(options)]))
        let task = await ours.manager.allTasks().first
        var outcome: Result<ManagedTask, any Error>?
        if let task {
            do {
                outcome = .success(try await ours.manager.handle(forTask: task.id).result())
            } catch {
                outcome = .failure(error)
            }
        }
        await ours.stop()
        #expect(result(added)?.arrayValue?.count == 1, "\(added.serialized)")
        #expect(task?.pieceChecksums?.digests.count == 4)
        #expect(try outcome?.get().state == .completed)
        #expect(fileMatchesPattern(scratch.path + "/ml/pc.bin", size: size, seed: 48))
        // The ranges asked of each URL, the probe's `bytes=0-0` left out.
        func ranges(_ origin: FaultOrigin) -> [Range<Int64>] { origin.requests("/pc.bin").compactMap(\.byteRange).filter { $0 != 0..<1 } }
        let bad = try #require(ranges(corrupt).first.map { $0.lowerBound / piece }, "\(ranges(corrupt))")
        let again = ranges(origin).filter { $0 == bad * piece..<(bad + 1) * piece }
        #expect(again.count == 1, "piece \(bad) asked again once, of the good URL: \(ranges(origin))")
    }
}
