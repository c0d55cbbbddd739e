import DownloadKit
import Foundation
import Glibc
import HTTPClient
import Testing
import TestOrigin

/// `downloadkit get --metalink FILE` end to end (issue #48, docs/METALINK.md): the real executable against
/// nginx on private ports, each server's access log witnessing what it served.
@Suite(.timeLimit(.minutes(3)))
struct MetalinkCLITests {
    static let seed: UInt64 = 0x4D4C

    /// A document root holding `name` (`size` pattern bytes), and its SHA-256.
    static func root(_ name: String, size: Int) throws -> (ScratchDirectory, String) {
        let root = try ScratchDirectory()
        try Data(TestPattern.bytes(offset: 0, count: size, seed: seed)).write(to: URL(fileURLWithPath: root.file(name)))
        return (root, try ApacheDigestTests.sha256(root.file(name)))
    }

    static func write(_ text: String, to dir: ScratchDirectory, _ name: String) throws -> String {
        let path = dir.path + "/../" + UUID().uuidString + "-" + name
        try text.write(toFile: path, atomically: true, encoding: .utf8)
        return path
    }

    /// Runs `get --metalink` on `text` (written beside a new scratch directory, plus the arguments `extra` gives for
    /// it) and expects the usage/input status (64), the message `expected` gives for the document's path, and
    /// nothing written.
    static func expectRefused(
        _ text: String, _ name: String, extra: (ScratchDirectory) -> [String] = { _ in [] },
        saying expected: (String) -> String
    ) throws {
        let executable = try #require(CLITests.executable)
        let dir = try ScratchDirectory()
        let document = try write(text, to: dir, name)
        defer { try? FileManager.default.removeItem(atPath: document) }
        let run = try CLITests.runBlocking(executable, ["get", "--metalink", document] + extra(dir), in: dir, timeout: 30)
        #expect(run.exitCode == 64, "\(run.output)")
        #expect(run.output.contains(expected(document)), "\(run.output)")
        #expect(dir.contents.isEmpty)
    }

    static func metalink4(name: String, size: Int, sha256: String, urls: [String]) -> String {
        let urlLines = urls.enumerated().map { "    <url priority=\"\($0.offset + 1)\">\($0.element)</url>" }
        return """
            <?xml version="1.0" encoding="UTF-8"?>
            <metalink xmlns="urn:ietf:params:xml:ns:metalink">
              <file name="\(name)">
                <size>\(size)</size>
                <hash type="sha-1">\(String(repeating: "0", count: 40))</hash>
                <hash type="sha-256">\(sha256)</hash>
            \(urlLines.joined(separator: "\n"))
                <metaurl mediatype="torrent">http://127.0.0.1:9/\(name).torrent</metaurl>
              </file>
            </metalink>
            """
    }

    /// Two nginx servers with one file: both serve bytes of it, the file is right, the torrent is skipped
    /// with a note; the SHA-1 given beside the SHA-256 is not the one checked (it is wrong on purpose).
    @Test func metalink4WithTwoURLsUsesBothAndChecksTheSHA256() async throws {
        let size = 8 << 20
        let (root, sha) = try Self.root("m.bin", size: size)
        let servers = try (0..<2).map { _ in
            try NginxServer(configuration: NginxConfiguration(documentRoot: root.path, limitRate: 2 << 20))
        }
        defer { for server in servers { server.stop() } }
        let executable = try #require(CLITests.executable)
        let dir = try ScratchDirectory()
        let document = try Self.write(
            Self.metalink4(name: "m.bin", size: size, sha256: sha, urls: servers.map { $0.httpURL("/limited/m.bin") }),
            to: dir, "m.meta4")
        defer { try? FileManager.default.removeItem(atPath: document) }
        let run = try await CLITests.runOffPool(
            executable, ["get", "--metalink", document, "-d", dir.path, "--connections", "4", "--progress", "none"],
            in: dir, timeout: 90)
        #expect(run.exitCode == 0, "\(run.output)")
        #expect(try ApacheDigestTests.sha256(dir.file("m.bin")) == sha)
        #expect(dir.contents == ["m.bin"])
        #expect(run.output.contains("1 URL(s) skipped"), "\(run.output)")
        for server in servers {
            let served = try server.accessLog().filter { $0.uri == "/limited/m.bin" }.reduce(Int64(0)) {
                $0 + $1.bodyBytesSent
            }
            #expect(served > 64 << 10, "each server served a part: \(served) bytes")
        }
    }

    /// Metalink 3 (`preference`, `<verification>`), a name with a directory, under `-d DIR`.
    @Test func metalink3IsDownloadedIntoItsNamedSubdirectory() async throws {
        let size = 300_000
        let (root, sha) = try Self.root("m3.bin", size: size)
        let server = try NginxServer(configuration: NginxConfiguration(documentRoot: root.path))
        defer { server.stop() }
        let executable = try #require(CLITests.executable)
        let dir = try ScratchDirectory()
        let document = try Self.write(
            """
            <?xml version="1.0" encoding="UTF-8"?>
            <metalink version="3.0" xmlns="http://www.metalinker.org/">
              <files>
                <file name="sub/m3.bin">
                  <size>\(size)</size>
                  <verification><hash type="sha256">\(sha)</hash></verification>
                  <resources>
                    <url type="http" preference="100">\(server.httpURL("/m3.bin"))</url>
                    <url type="bittorrent" preference="90">http://127.0.0.1:9/m3.torrent</url>
                  </resources>
                </file>
              </files>
            </metalink>
            """, to: dir, "m.metalink")
        defer { try? FileManager.default.removeItem(atPath: document) }
        let run = try await CLITests.runOffPool(
            executable, ["get", "--metalink", document, "-d", dir.path, "--progress", "none"], in: dir, timeout: 60)
        #expect(run.exitCode == 0, "\(run.output)")
        #expect(try ApacheDigestTests.sha256(dir.file("sub/m3.bin")) == sha)
    }

    /// A wrong SHA-256 in the document: the checksum status (7), and no file at the destination.
    @Test func aWrongHashFailsWithTheChecksumError() async throws {
        let size = 200_000
        let (root, sha) = try Self.root("w.bin", size: size)
        let server = try NginxServer(configuration: NginxConfiguration(documentRoot: root.path))
        defer { server.stop() }
        let executable = try #require(CLITests.executable)
        let dir = try ScratchDirectory()
        let wrong = String(sha.reversed())
        let document = try Self.write(
            Self.metalink4(name: "w.bin", size: size, sha256: wrong, urls: [server.httpURL("/w.bin")]), to: dir, "w.meta4")
        defer { try? FileManager.default.removeItem(atPath: document) }
        let run = try await CLITests.runOffPool(
            executable, ["get", "--metalink", document, "-o", dir.file("w.bin"), "--progress", "none"], in: dir,
            timeout: 60)
        #expect(run.exitCode == 7, "\(run.output)")
        #expect(run.output.lowercased().contains("checksum"), "\(run.output)")
        #expect(!FileManager.default.fileExists(atPath: dir.file("w.bin")))
    }

    /// No hash, and a `<size>` the server's file does not have: the checksum status (7), naming both lengths.
    @Test func aSizeOnlyMetalinkOfAnotherLengthFails() async throws {
        let (root, _) = try Self.root("s.bin", size: 100_000)
        let server = try NginxServer(configuration: NginxConfiguration(documentRoot: root.path))
        defer { server.stop() }
        let executable = try #require(CLITests.executable)
        let dir = try ScratchDirectory()
        let document = try Self.write(
            """
            <metalink xmlns="urn:ietf:params:xml:ns:metalink">
              <file name="s.bin"><size>100001</size><url>\(server.httpURL("/s.bin"))</url></file>
            </metalink>
            """, to: dir, "s.meta4")
        defer { try? FileManager.default.removeItem(atPath: document) }
        let run = try await CLITests.runOffPool(
            executable, ["get", "--metalink", document, "-d", dir.path, "--progress", "none"], in: dir, timeout: 60)
        #expect(run.exitCode == 7, "\(run.output)")
        #expect(run.output.contains("had 100000 bytes, the Metalink's size is 100001: removed"), "\(run.output)")
        // A failed download leaves nothing under the destination name.
        #expect(!FileManager.default.fileExists(atPath: dir.file("s.bin")), "\(dir.contents)")
    }

    /// A malformed document: the usage/input status (64) and a message naming the file, line and column.
    @Test func aMalformedMetalinkIsAUsageErrorNamingLineAndColumn() throws {
        try Self.expectRefused(
            """
            <?xml version="1.0" encoding="UTF-8"?>
            <metalink xmlns="urn:ietf:params:xml:ns:metalink">
              <file name="x.bin">
                <url>http://127.0.0.1:9/x.bin</url>
              </file>
              <oops>
            </metalink>
            """, "bad.meta4") { "--metalink \($0): malformedXML at line 7, column 1" }
    }

    /// A DOCTYPE (the door to entity expansion and external entities) is refused before anything is fetched.
    @Test func aDoctypeIsRefused() throws {
        try Self.expectRefused(
            """
            <?xml version="1.0"?>
            <!DOCTYPE metalink [<!ENTITY x SYSTEM "file:///etc/passwd">]>
            <metalink xmlns="urn:ietf:params:xml:ns:metalink"><file name="x.bin"><url>http://127.0.0.1:9/&x;</url></file></metalink>
            """, "dt.meta4") { _ in "doctypeRefused at line 2" }
    }

    /// `-o FILE` with a document of two files is a usage error naming the option; nothing is fetched.
    @Test func outputWithTwoFilesIsAUsageErrorNamingTheOption() throws {
        try Self.expectRefused(
            """
            <metalink xmlns="urn:ietf:params:xml:ns:metalink">
              <file name="a.bin"><url>http://127.0.0.1:9/a</url></file>
              <file name="b.bin"><url>http://127.0.0.1:9/b</url></file>
            </metalink>
            """, "two.meta4", extra: { ["-o", $0.file("a.bin")] }) { _ in "-o FILE takes a Metalink with one file" }
    }
}
