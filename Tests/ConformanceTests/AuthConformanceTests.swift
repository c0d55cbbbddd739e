import DownloadKit
import Foundation
import Glibc
import HTTPClient
import HTTPWire
import TestOrigin
import Testing

/// nginx with `auth_basic` locations and a TLS site that requires client certificates (issue #17).
private final class AuthNginx {
    static let user = "alice"
    static let password = "wonder land:42"
    static let size: Int64 = 3 << 20 + 17
    static let bigSize: Int64 = 24 << 20
    static let seed: UInt64 = 0xA17

    let root: ScratchDirectory
    let certificateDirectory: ScratchDirectory
    let certificates: TestCertificates
    let clients: ClientCertificates
    let nginx: NginxServer

    init() throws {
        root = try ScratchDirectory()
        certificateDirectory = try ScratchDirectory()
        try Self.writePattern(root.file("file.bin"), size: Self.size)
        try Self.writePattern(root.file("big.bin"), size: Self.bigSize)
        let line = try BasicAuthFixture.htpasswdLine(user: Self.user, password: Self.password)
        let userFile = certificateDirectory.file("htpasswd")
        try (line + "\n").write(toFile: userFile, atomically: true, encoding: .utf8)
        certificates = try TestCertificates.generate(in: certificateDirectory.path)
        clients = try ClientCertificates.generate(signedBy: certificates)
        var mtls = TLSSite(
            name: "mtls", certificatePath: certificates.valid.certificatePath,
            privateKeyPath: certificates.valid.privateKeyPath)
        mtls.clientCertificateAuthorityPath = clients.authorityPath
        let valid = TLSSite(
            name: "valid", certificatePath: certificates.valid.certificatePath,
            privateKeyPath: certificates.valid.privateKeyPath)
        let directives =
            BasicAuthFixture.location(prefix: "/private/", documentRoot: root.path, userFile: userFile) + "\n"
            + BasicAuthFixture.location(
                prefix: "/private-slow/", documentRoot: root.path, userFile: userFile, limitRate: 4 << 20)
        nginx = try NginxServer(
            configuration: NginxConfiguration(
                documentRoot: root.path, tlsSites: [valid, mtls], extraServerDirectives: directives))
    }

    deinit { nginx.stop() }

    static func writePattern(_ path: String, size: Int64) throws {
        guard FileManager.default.createFile(atPath: path, contents: nil) else { throw OriginError("creating \(path)") }
        let handle = try FileHandle(forWritingTo: URL(fileURLWithPath: path))
        defer { try? handle.close() }
        var offset: Int64 = 0
        while offset < size {
            let count = Int(min(1 << 20, size - offset))
            try handle.write(contentsOf: TestPattern.bytes(offset: offset, count: count, seed: seed))
            offset += Int64(count)
        }
    }

    func https(_ site: String, _ path: String) -> String {
        nginx.tlsURL(site: site, path: path, host: "localhost") ?? "https://invalid.invalid"
    }
}

/// Runs the CLI to completion off the cooperative pool.
private func cli(_ arguments: [String], in dir: ScratchDirectory, environment: [String: String] = [:]) async throws
    -> CLITests.Run
{
    let executable = try #require(CLITests.executable, "downloadkit executable not found; run swift build --build-tests")
    if environment.isEmpty {
        return try await CLITests.runOffPool(executable, arguments, in: dir, timeout: 60)
    }
    // Environment variables go through env(1), so the runner stays the shared one.
    let assignments = environment.map { "\($0.key)=\($0.value)" }
    return try await CLITests.runOffPool("/usr/bin/env", assignments + [executable] + arguments, in: dir, timeout: 60)
}

@Suite(.serialized, .timeLimit(.minutes(3)))
struct AuthConformanceTests {
    @Test func basicAuthWithUserAndWithNetrcFile() async throws {
        let fixture = try AuthNginx()
        let dir = try ScratchDirectory()
        let url = fixture.nginx.httpURL("/private/file.bin")
        let user = "\(AuthNginx.user):\(AuthNginx.password)"

        let withUser = try await cli(["get", url, "-o", dir.file("a.bin"), "--progress", "none", "--user", user], in: dir)
        #expect(withUser.exitCode == 0, "\(withUser.output)")
        #expect(fileMatchesPattern(dir.file("a.bin"), size: AuthNginx.size, seed: AuthNginx.seed))
        let entries = try fixture.nginx.accessLog(waitingFor: 2)
        #expect(entries.map(\.status) == [401, 200])
        #expect(entries[0].authorization == nil, "nothing is sent before the challenge")
        #expect(entries[1].authorization == "Basic " + Base64.encode(user))
        #expect(!withUser.output.contains(AuthNginx.password), "the password never reaches the output")

        let wrong = try await cli(["get", url, "-o", dir.file("w.bin"), "--progress", "none", "-u", "alice:nope"], in: dir)
        #expect(wrong.exitCode == 3, "\(wrong.output)")
        #expect(!FileManager.default.fileExists(atPath: dir.file("w.bin")))

        let netrc = dir.path + "/../netrc-\(UUID().uuidString)"
        defer { try? FileManager.default.removeItem(atPath: netrc) }
        try "machine 127.0.0.1\n  login \(AuthNginx.user)\n  password \"\(AuthNginx.password)\"\n"
            .write(toFile: netrc, atomically: true, encoding: .utf8)
        let withNetrc = try await cli(
            ["get", url, "-o", dir.file("n.bin"), "--progress", "none", "--netrc-file", netrc], in: dir)
        #expect(withNetrc.exitCode == 0, "\(withNetrc.output)")
        #expect(fileMatchesPattern(dir.file("n.bin"), size: AuthNginx.size, seed: AuthNginx.seed))

        // The netrc entry is for 127.0.0.1: the same server asked as localhost gets nothing.
        let otherHost = try await cli(
            ["get", fixture.nginx.httpURL("/private/file.bin", host: "localhost"), "-o", dir.file("o.bin"),
             "--progress", "none", "--netrc-file", netrc], in: dir)
        #expect(otherHost.exitCode == 3, "\(otherHost.output)")
        let last = try fixture.nginx.accessLog().last
        #expect(last?.status == 401 && last?.authorization == nil)
    }

    @Test func segmentedDownloadAuthenticatesEveryConnection() async throws {
        let fixture = try AuthNginx()
        let dir = try ScratchDirectory()
        let url = fixture.nginx.httpURL("/private/big.bin")
        let authenticator = Authenticator()
        authenticator.addCredential(Credential(user: AuthNginx.user, password: AuthNginx.password), for: try HTTPURL(url))
        var client = DKHTTPClientConfiguration(connectTimeout: .seconds(10), idleTimeout: .seconds(10))
        client.authenticator = authenticator
        var configuration = DownloadConfiguration(retries: 1, client: client)
        configuration.connections = 4
        let download = Download(DownloadRequest(url: url, destination: .file(dir.file("big.bin"))), configuration: configuration)
        download.start()
        let result = try await download.result()
        #expect(result.path == dir.file("big.bin"))
        #expect(fileMatchesPattern(dir.file("big.bin"), size: AuthNginx.bigSize, seed: AuthNginx.seed))
        let entries = try fixture.nginx.accessLog()
        #expect(entries.filter { $0.status == 206 }.count >= 2, "segments ran: \(entries.map(\.status))")
        #expect(entries.filter { $0.status != 401 }.allSatisfy { $0.authorization != nil })
        #expect(entries.filter { $0.status == 401 }.count == 1, "after one challenge the origin gets Basic up front")
    }

    @Test func resumeWithCredentialsAfterSIGKILL() async throws {
        let fixture = try AuthNginx()
        let dir = try ScratchDirectory()
        let executable = try #require(CLITests.executable)
        let arguments = [
            "get", fixture.nginx.httpURL("/private-slow/big.bin"), "-o", dir.file("big.bin"), "--progress", "none",
            "--user", "\(AuthNginx.user):\(AuthNginx.password)",
        ]
        let log = dir.path + "/../authkill-\(UUID().uuidString).log"
        defer { try? FileManager.default.removeItem(atPath: log) }
        let child = try ChildProcess(executable, arguments, outputPath: log)
        var partial: Int64 = 0
        for _ in 0..<2000 {
            partial = dir.size("big.bin.dkpart") ?? 0
            if partial >= 2 << 20 && FileManager.default.fileExists(atPath: dir.file("big.bin.dkresume")) { break }
            try await Task.sleep(for: .milliseconds(10))
        }
        kill(child.pid, SIGKILL)
        _ = try await offloaded { child.waitForExit(timeout: 10) }
        #expect(partial >= 2 << 20, "the first run wrote \(partial) bytes before the kill")
        let record = try Data(contentsOf: URL(fileURLWithPath: dir.file("big.bin.dkresume")))
        #expect(record.range(of: Data(AuthNginx.password.utf8)) == nil, "no password in the resume record")
        #expect(record.range(of: Data(Base64.encode("\(AuthNginx.user):\(AuthNginx.password)").utf8)) == nil)

        let rerun = try await cli(arguments, in: dir)
        #expect(rerun.exitCode == 0, "\(rerun.output)")
        #expect(fileMatchesPattern(dir.file("big.bin"), size: AuthNginx.bigSize, seed: AuthNginx.seed))
        #expect(dir.contents == ["big.bin"])
        let resumed = try fixture.nginx.accessLog().filter { $0.status == 206 }
        #expect(!resumed.isEmpty, "the rerun continued with a range request")
        #expect(resumed.allSatisfy { $0.authorization != nil && $0.range != nil })
    }

    @Test func mutualTLSWithRightWrongAndMissingCertificates() async throws {
        let fixture = try AuthNginx()
        let dir = try ScratchDirectory()
        let clients = fixture.clients
        let url = fixture.https("mtls", "/file.bin")
        let base = ["get", url, "--progress", "none", "--cacert", fixture.certificates.caCertificatePath]

        let right = try await cli(
            base + ["-o", dir.file("r.bin"), "--cert", clients.valid.certificatePath, "--key", clients.valid.privateKeyPath],
            in: dir)
        #expect(right.exitCode == 0, "\(right.output)")
        #expect(fileMatchesPattern(dir.file("r.bin"), size: AuthNginx.size, seed: AuthNginx.seed))

        let missing = try await cli(base + ["-o", dir.file("m.bin")], in: dir)
        #expect(missing.exitCode == 3, "nginx answers 400 without a client certificate: \(missing.output)")
        #expect(missing.output.contains("400"))
        let untrusted = try await cli(
            base + ["-o", dir.file("u.bin"), "--cert", clients.untrusted.certificatePath, "--key", clients.untrusted.privateKeyPath],
            in: dir)
        #expect(untrusted.exitCode == 3, "\(untrusted.output)")
        #expect(!FileManager.default.fileExists(atPath: dir.file("m.bin")))

        let passphraseFile = dir.path + "/../pass-\(UUID().uuidString)"
        defer { try? FileManager.default.removeItem(atPath: passphraseFile) }
        try (clients.passphrase + "\n").write(toFile: passphraseFile, atomically: true, encoding: .utf8)
        let encrypted = try await cli(
            base + ["-o", dir.file("e.bin"), "--cert", clients.valid.certificatePath, "--key", clients.encryptedKeyPath,
                    "--key-passphrase-file", passphraseFile], in: dir)
        #expect(encrypted.exitCode == 0, "\(encrypted.output)")
        #expect(fileMatchesPattern(dir.file("e.bin"), size: AuthNginx.size, seed: AuthNginx.seed))

        let wrongPassphrase = try await cli(
            base + ["-o", dir.file("p.bin"), "--cert", clients.valid.certificatePath, "--key", clients.encryptedKeyPath],
            in: dir, environment: [AuthOptionsEnvironment.passphrase: "not it"])
        #expect(wrongPassphrase.exitCode == 5, "\(wrongPassphrase.output)")
        #expect(wrongPassphrase.output.contains("clientKeyPassphraseWrong"))
        #expect(!wrongPassphrase.output.contains("not it"))

        let mismatch = try await cli(
            base + ["-o", dir.file("x.bin"), "--cert", clients.valid.certificatePath, "--key", clients.unrelatedKeyPath],
            in: dir)
        #expect(mismatch.exitCode == 5, "\(mismatch.output)")
        #expect(mismatch.output.contains("clientKeyMismatch"))
    }

    @Test func pinnedPublicKeyRightAndWrong() async throws {
        let fixture = try AuthNginx()
        let dir = try ScratchDirectory()
        let rightPin = try ClientCertificates.opensslPublicKeyPin(certificatePath: fixture.certificates.valid.certificatePath)
        let wrongPin = "sha256//" + Base64.encode([UInt8](repeating: 7, count: 32))
        let base = ["get", fixture.https("valid", "/file.bin"), "--progress", "none", "--cacert", fixture.certificates.caCertificatePath]

        let right = try await cli(base + ["-o", dir.file("ok.bin"), "--pinnedpubkey", wrongPin + ";" + rightPin], in: dir)
        #expect(right.exitCode == 0, "\(right.output)")
        #expect(fileMatchesPattern(dir.file("ok.bin"), size: AuthNginx.size, seed: AuthNginx.seed))
        let wrong = try await cli(base + ["-o", dir.file("no.bin"), "--pinnedpubkey", wrongPin], in: dir)
        #expect(wrong.exitCode == 5, "\(wrong.output)")
        #expect(wrong.output.contains("matches no pinned key") && wrong.output.contains(rightPin), "\(wrong.output)")
        let malformed = try await cli(base + ["-o", dir.file("bad.bin"), "--pinnedpubkey", "sha256//short"], in: dir)
        #expect(malformed.exitCode == 64, "\(malformed.output)")
    }
}

/// The environment variable `--key` reads its passphrase from (mirrors the CLI's constant).
enum AuthOptionsEnvironment {
    static let passphrase = "DOWNLOADKIT_KEY_PASSPHRASE"
}

@Suite(.timeLimit(.minutes(2)))
struct CookieAndDigestCLITests {
    @Test func cookieJarIsWrittenReadBackAndNeverSentToAnotherHost() async throws {
        let origin = try FaultOrigin()
        defer { origin.shutdown() }
        let gate = CookieGate()
        let body = Array("cookie-gated body\n".utf8)
        origin.serve("/login", gate.login(redirectTo: "/file"))
        origin.serve("/cross", gate.login(redirectTo: "http://localhost:\(origin.port)/file"))
        origin.serve("/file", gate.protected(body: body))
        let dir = try ScratchDirectory()
        let jar = dir.path + "/../jar-\(UUID().uuidString).txt"
        defer { try? FileManager.default.removeItem(atPath: jar) }

        let first = try await cli(
            ["get", origin.url("/login"), "-o", dir.file("a.txt"), "--progress", "none", "--cookie-jar", jar], in: dir)
        #expect(first.exitCode == 0, "\(first.output)")
        #expect(FileManager.default.contents(atPath: dir.file("a.txt")) == Data(body))
        var info = stat()
        #expect(stat(jar, &info) == 0 && info.st_mode & 0o777 == 0o600)
        let saved = try String(contentsOfFile: jar, encoding: .utf8)
        #expect(saved.hasPrefix("# Netscape HTTP Cookie File"))
        #expect(saved.contains("127.0.0.1\tFALSE\t/\tFALSE\t0\t\(gate.name)\t\(gate.value)"), "\(saved)")

        let readBack = try await cli(
            ["get", origin.url("/file"), "-o", dir.file("b.txt"), "--progress", "none", "--cookie", jar], in: dir)
        #expect(readBack.exitCode == 0, "\(readBack.output)")
        let without = try await cli(["get", origin.url("/file"), "-o", dir.file("c.txt"), "--progress", "none"], in: dir)
        #expect(without.exitCode == 3, "\(without.output)")

        let before = origin.requests("/file").count
        let cross = try await cli(
            ["get", origin.url("/cross"), "-o", dir.file("d.txt"), "--progress", "none", "--cookie", jar], in: dir)
        #expect(cross.exitCode == 3, "localhost is another host: \(cross.output)")
        let crossRequests = origin.requests("/file").dropFirst(before)
        #expect(!crossRequests.isEmpty)
        #expect(crossRequests.allSatisfy { $0.header("Host")?.hasPrefix("localhost") == true && $0.header("Cookie") == nil })
    }

    @Test func credentialsDoNotFollowACrossOriginRedirect() async throws {
        let origin = try FaultOrigin()
        defer { origin.shutdown() }
        let token = "Basic " + Base64.encode("ann:pw")
        // 127.0.0.1 wants credentials, then redirects to localhost (same port, another origin), which
        // challenges too: it must get nothing.
        origin.serve("/start", .script { request, connection in
            connection.keepsAlive = true
            if request.header("Host")?.hasPrefix("127.0.0.1") == true, request.header("Authorization") == token {
                try connection.write(
                    "HTTP/1.1 302 Found\r\nLocation: http://localhost:\(origin.port)/start\r\nContent-Length: 0\r\n\r\n")
            } else {
                try connection.write(
                    "HTTP/1.1 401 Unauthorized\r\nWWW-Authenticate: Basic realm=\"r\"\r\nContent-Length: 0\r\n\r\n")
            }
        })
        let dir = try ScratchDirectory()
        let result = try await cli(
            ["get", origin.url("/start"), "-o", dir.file("x"), "--progress", "none", "--user", "ann:pw"], in: dir)
        #expect(result.exitCode == 3, "\(result.output)")
        let requests = origin.requests("/start")
        let toLocalhost = requests.filter { $0.header("Host")?.hasPrefix("localhost") == true }
        #expect(requests.contains { $0.header("Authorization") == token }, "127.0.0.1 got its credentials")
        #expect(!toLocalhost.isEmpty, "the redirect was followed")
        #expect(toLocalhost.allSatisfy { $0.header("Authorization") == nil })
    }

    @Test func queueRunAnswersDigestWithoutStoringTheCredentials() async throws {
        let origin = try FaultOrigin()
        defer { origin.shutdown() }
        let body = Array(repeating: UInt8(ascii: "q"), count: 50_000)
        let digest = DigestOrigin(user: "quinn", password: "queue-secret", algorithm: "SHA-256", body: body)
        origin.serve("/q.bin", digest.route)
        let state = try ScratchDirectory()
        let dir = try ScratchDirectory()
        let added = try await cli(["queue", "--state", state.path, "add", origin.url("/q.bin"), "-o", dir.file("q.bin")], in: dir)
        #expect(added.exitCode == 0, "\(added.output)")
        let run = try await cli(
            ["queue", "--state", state.path, "run", "--progress", "none", "--user", "quinn:queue-secret"], in: dir)
        #expect(run.exitCode == 0, "\(run.output)")
        #expect(FileManager.default.contents(atPath: dir.file("q.bin")) == Data(body))
        #expect(digest.verifiedCount >= 1)
        for name in state.contents {
            let bytes = FileManager.default.contents(atPath: state.file(name)) ?? Data()
            #expect(bytes.range(of: Data("queue-secret".utf8)) == nil, "the password is not in \(name)")
        }
    }

    @Test(arguments: ["MD5", "SHA-256"])
    func digestWithUser(_ algorithm: String) async throws {
        let origin = try FaultOrigin()
        defer { origin.shutdown() }
        let body = Array(repeating: UInt8(ascii: "d"), count: 100_000)
        let digest = DigestOrigin(user: "dora", password: "pa ss", algorithm: algorithm, body: body)
        origin.serve("/d.bin", digest.route)
        let dir = try ScratchDirectory()
        let result = try await cli(
            ["get", origin.url("/d.bin"), "-o", dir.file("d.bin"), "--progress", "none", "--user", "dora:pa ss"], in: dir)
        #expect(result.exitCode == 0, "\(result.output)")
        #expect(FileManager.default.contents(atPath: dir.file("d.bin")) == Data(body))
        #expect(digest.verifiedCount >= 1 && digest.rejectedCount == 0)
    }
}
