import Foundation
import HTTPWire
import Testing
import TestOrigin

/// Runs the CLI with extra environment variables (through env(1), so the shared runner is used).
private func secretsCLI(_ arguments: [String], in dir: ScratchDirectory, environment: [String: String] = [:]) async throws
    -> CLITests.Run
{
    let executable = try #require(CLITests.executable, "downloadkit executable not found; run swift build --build-tests")
    let assignments = environment.map { "\($0.key)=\($0.value)" }
    return try await CLITests.runOffPool("/usr/bin/env", assignments + [executable] + arguments, in: dir, timeout: 60)
}

/// What user nobody reads in `/proc/PID/cmdline` of the client, taken by the origin's thread the moment
/// the authenticated request arrives: the client is then blocked waiting for the answer, so it is
/// certainly running (however late the test's own tasks get to run on a loaded machine).
private final class CmdlineWitness: @unchecked Sendable {
    private let lock = NSLock()
    private var pid: pid_t?
    private var seen: String?

    func watch(_ pid: pid_t) { lock.withLock { self.pid = pid } }
    var cmdline: String? { lock.withLock { seen } }

    /// Reads the watched process's cmdline as user nobody (NULs as spaces), once.
    func observe() {
        // The test sets the pid right after spawning; wait for it (bounded) if the client was quicker.
        var waited = 0
        while lock.withLock({ self.pid == nil }), waited < 10_000 {
            usleep(1_000)
            waited += 1
        }
        guard let pid = lock.withLock({ seen == nil ? self.pid : nil }) else { return }
        let result = try? ProcessRunner.run(
            "/usr/bin/setpriv", ["--reuid=65534", "--regid=65534", "--clear-groups", "cat", "/proc/\(pid)/cmdline"])
        let text = result.map { $0.succeeded ? $0.output.replacingOccurrences(of: "\0", with: " ") : "failed: \($0.output)" }
        lock.withLock { seen = text ?? "setpriv did not run" }
    }
}

/// A route that wants `Basic user:password` and then sends `body` slowly (about `seconds`); anything else
/// gets a 401 challenge. `witness` observes the client when the authenticated request arrives.
private func slowAuthenticatedRoute(
    user: String, password: String, body: [UInt8], seconds: Double, witness: CmdlineWitness? = nil
) -> Route {
    let token = "Basic " + Base64.encode(user + ":" + password)
    return .script { request, connection in
        guard request.header("Authorization") == token else {
            try connection.write(
                "HTTP/1.1 401 Unauthorized\r\nWWW-Authenticate: Basic realm=\"r\"\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
            return
        }
        witness?.observe()
        try connection.write("HTTP/1.1 200 OK\r\nContent-Length: \(body.count)\r\n\r\n")
        let pieces = 50
        try connection.writeStuttered(body, pieceSize: max(1, body.count / pieces), pause: seconds / Double(pieces))
    }
}

/// Issue #44, items 8 and 9, end to end through the `downloadkit` executable: what another local user
/// sees in `/proc/PID/cmdline`, what the error lines and logs show, and the file/environment
/// alternatives to secrets in argv.
@Suite(.serialized, .timeLimit(.minutes(3)))
struct SecretsExposureTests {
    @Test func secretsInArgvAreMaskedForAnotherUserAndStillAuthenticate() async throws {
        let origin = try FaultOrigin()
        defer { origin.shutdown() }
        let body = (0..<400_000).map { UInt8(truncatingIfNeeded: $0 &* 31) }
        let witness = CmdlineWitness()
        origin.serve(
            "/slow.bin", slowAuthenticatedRoute(user: "alice", password: "ARGV-SECRET", body: body, seconds: 1, witness: witness))
        let dir = try ScratchDirectory()
        let executable = try #require(CLITests.executable)
        let arguments = [
            "get", origin.url("/slow.bin") + "?sig=QUERY-SECRET&id=7", "-u", "alice:ARGV-SECRET",
            "--header", "Cookie: c=COOKIE-SECRET", "--header", "X-Visible: shown",
            "--credential-header=X-Key: KEY-SECRET", "-o", dir.file("slow.bin"), "--progress", "none",
        ]
        let child = try ChildProcess(executable, arguments, outputPath: dir.path + "/../argv-\(UUID().uuidString).log")
        witness.watch(child.pid)
        let status = try await offloaded { child.waitForExit(timeout: 60) }
        let seen = try #require(witness.cmdline, "the authenticated request never came")
        #expect(seen.contains("get") && seen.contains("-u") && seen.contains("X-Visible: shown"), "read the real cmdline: \(seen)")
        for secret in ["ARGV-SECRET", "QUERY-SECRET", "COOKIE-SECRET", "KEY-SECRET"] {
            #expect(!seen.contains(secret), "\(secret) is visible to another user: \(seen)")
        }
        #expect(seen.contains("sig=************"), "\(seen)")
        #expect(status == 0, "the download authenticated with the masked option's value")
        #expect(FileManager.default.contents(atPath: dir.file("slow.bin")) == Data(body))
        let sent = origin.requests("/slow.bin")
        #expect(sent.contains { $0.header("Cookie") == "c=COOKIE-SECRET" && $0.header("X-Key") == "KEY-SECRET" })
        #expect(sent.contains { $0.target.hasSuffix("?sig=QUERY-SECRET&id=7") }, "the URL went out unmasked")
    }

    @Test(arguments: ["-v", "-vvv"])
    func aFailedGetPrintsNeitherThePasswordNorTheSignature(_ verbosity: String) async throws {
        let origin = try FaultOrigin()
        defer { origin.shutdown() }
        let dir = try ScratchDirectory()
        let url = "http://u:PASS@127.0.0.1:\(origin.port)/404?sig=SECRET"
        let result = try await secretsCLI(["get", url, "-o", dir.file("x"), "--progress", "none", verbosity], in: dir)
        #expect(result.exitCode != 0)
        #expect(result.output.contains("error: http://u:***@127.0.0.1:\(origin.port)/404?sig=***"), "\(result.output)")
        #expect(result.output.contains("404"))
        #expect(!result.output.contains("PASS") && !result.output.contains("SECRET"), "\(result.output)")
        let json = try await secretsCLI(["get", url, "-o", dir.file("x"), "--progress", "json"], in: dir)
        #expect(!json.output.contains("PASS"), "JSON lines show the URL without its password: \(json.output)")
    }

    @Test(arguments: [
        "http://u:PASS@127.0.0.1:99999/x?sig=SECRET", "http://u:PASS@127.0.0.1:0/x?sig=SECRET",
        "ftp://u:PASS@127.0.0.1/x?sig=SECRET",
    ])
    func anInvalidURLIsNamedWithoutItsSecrets(_ url: String) async throws {
        let dir = try ScratchDirectory()
        let result = try await secretsCLI(["get", url, "-o", dir.file("x"), "--progress", "none", "-vvv"], in: dir)
        #expect(result.exitCode != 0)
        #expect(result.output.contains("u:***@127.0.0.1"), "\(result.output)")
        #expect(!result.output.contains("PASS") && !result.output.contains("SECRET"), "\(result.output)")
        let errorLines = result.output.split(separator: "\n").filter { $0.hasPrefix("error:") }
        #expect(errorLines.count == 1 && errorLines[0].components(separatedBy: "u:***@").count == 2, "named once: \(errorLines)")
    }

    @Test func anHTTPSToHTTPRefusalNamesTheTargetWithoutItsSecrets() async throws {
        let target = try FaultOrigin()
        defer { target.shutdown() }
        let certificatesDirectory = try ScratchDirectory()
        let root = try ScratchDirectory()
        let certificates = try TestCertificates.generate(in: certificatesDirectory.path)
        let site = TLSSite(
            name: "valid", certificatePath: certificates.valid.certificatePath, privateKeyPath: certificates.valid.privateKeyPath)
        let nginx = try NginxServer(
            configuration: NginxConfiguration(
                documentRoot: root.path,
                redirects: [NginxRedirect(from: "/to-http", status: 302, to: "http://v:PASS@127.0.0.1:\(target.port)/f?sig=SECRET")],
                tlsSites: [site]))
        defer { nginx.stop() }
        let url = try #require(nginx.tlsURL(site: "valid", path: "/to-http"))
        let dir = try ScratchDirectory()
        let result = try await secretsCLI(
            ["get", url, "-o", dir.file("x"), "--progress", "none", "--cacert", certificates.caCertificatePath, "-vvv"], in: dir)
        #expect(result.exitCode != 0)
        #expect(result.output.contains("refusing redirect from https to http"), "\(result.output)")
        #expect(result.output.contains("sig=***"), "\(result.output)")
        #expect(!result.output.contains("PASS") && !result.output.contains("SECRET"), "\(result.output)")
        #expect(target.requests().isEmpty)
    }

    @Test func credentialsFromAPrivateFileOrTheEnvironmentWork() async throws {
        let origin = try FaultOrigin()
        defer { origin.shutdown() }
        let body = Array(repeating: UInt8(ascii: "s"), count: 10_000)
        origin.serve("/f.bin", slowAuthenticatedRoute(user: "fay", password: "FILE-SECRET", body: body, seconds: 0.01))
        let dir = try ScratchDirectory()
        let secret = dir.file("user.secret")
        try "fay:FILE-SECRET\n".write(toFile: secret, atomically: false, encoding: .utf8)
        chmod(secret, 0o600)
        let fromFile = try await secretsCLI(
            ["get", origin.url("/f.bin"), "-o", dir.file("a.bin"), "--progress", "none", "--user-file", secret], in: dir)
        #expect(fromFile.exitCode == 0, "\(fromFile.output)")
        #expect(FileManager.default.contents(atPath: dir.file("a.bin")) == Data(body))

        let fromEnvironment = try await secretsCLI(
            ["get", origin.url("/f.bin"), "-o", dir.file("b.bin"), "--progress", "none"], in: dir,
            environment: ["DOWNLOADKIT_USER": "fay:FILE-SECRET"])
        #expect(fromEnvironment.exitCode == 0, "\(fromEnvironment.output)")
        #expect(FileManager.default.contents(atPath: dir.file("b.bin")) == Data(body))

        // Credential headers from a private file: sent, never in argv.
        let headers = dir.file("headers.secret")
        try "# tokens\nAuthorization: Basic \(Base64.encode("fay:FILE-SECRET"))\n".write(toFile: headers, atomically: false, encoding: .utf8)
        chmod(headers, 0o600)
        let fromHeaderFile = try await secretsCLI(
            ["get", origin.url("/f.bin"), "-o", dir.file("c.bin"), "--progress", "none", "--header-file", headers], in: dir)
        #expect(fromHeaderFile.exitCode == 0, "\(fromHeaderFile.output)")
        #expect(FileManager.default.contents(atPath: dir.file("c.bin")) == Data(body))
    }

    @Test func proxyCredentialsFromAPrivateFileOrTheEnvironmentWork() async throws {
        let root = try ScratchDirectory()
        let body = Data((0..<100_000).map { UInt8(truncatingIfNeeded: $0 &* 7) })
        #expect(FileManager.default.createFile(atPath: root.file("p.bin"), contents: body))
        let nginx = try await offloaded { try NginxServer(configuration: NginxConfiguration(documentRoot: root.path)) }
        let microsocks = try await offloaded { try ProxyServer(.microsocks, user: "bob", password: "PROXY-SECRET") }
        defer {
            nginx.stop()
            microsocks.stop()
        }
        let dir = try ScratchDirectory()
        let url = nginx.httpURL("/p.bin")
        let proxy = microsocks.url(scheme: "socks5h")
        let without = try await secretsCLI(
            ["get", url, "-o", dir.file("none.bin"), "--progress", "none", "--proxy", proxy, "--retries", "0"], in: dir)
        #expect(without.exitCode != 0, "the proxy wants credentials: \(without.output)")
        let secret = dir.file("proxy.secret")
        try "bob:PROXY-SECRET\n".write(toFile: secret, atomically: false, encoding: .utf8)
        chmod(secret, 0o600)
        let fromFile = try await secretsCLI(
            ["get", url, "-o", dir.file("a.bin"), "--progress", "none", "--proxy", proxy, "--proxy-user-file", secret], in: dir)
        #expect(fromFile.exitCode == 0, "\(fromFile.output)")
        #expect(FileManager.default.contents(atPath: dir.file("a.bin")) == body)
        let fromEnvironment = try await secretsCLI(
            ["get", url, "-o", dir.file("b.bin"), "--progress", "none", "--proxy", proxy], in: dir,
            environment: ["DOWNLOADKIT_PROXY_USER": "bob:PROXY-SECRET"])
        #expect(fromEnvironment.exitCode == 0, "\(fromEnvironment.output)")
        #expect(FileManager.default.contents(atPath: dir.file("b.bin")) == body)
    }

    @Test func aSecretFileOthersCanReadOrThatIsNotYoursIsRefusedNamingIt() async throws {
        let origin = try FaultOrigin()
        defer { origin.shutdown() }
        origin.serve("/f.bin", .resource(Resource(size: 1000, seed: 5)))
        let dir = try ScratchDirectory()
        let open = dir.file("world-readable.secret")
        try "fay:FILE-SECRET\n".write(toFile: open, atomically: false, encoding: .utf8)
        chmod(open, 0o644)
        let notMine = dir.file("nobodys.secret")
        try "fay:FILE-SECRET\n".write(toFile: notMine, atomically: false, encoding: .utf8)
        chmod(notMine, 0o600)
        chown(notMine, 65534, 65534)
        for (option, file, why) in [
            ("--user-file", open, "accessible by group or others"), ("--user-file", notMine, "owned by uid 65534"),
            ("--header-file", open, "accessible by group or others"), ("--proxy-user-file", open, "accessible by group or others"),
        ] {
            let result = try await secretsCLI(
                ["get", origin.url("/f.bin"), "-o", dir.file("x.bin"), "--progress", "none", option, file], in: dir)
            #expect(result.exitCode != 0, "\(option) \(file): \(result.output)")
            #expect(result.output.contains("\(option) \(file)") && result.output.contains(why), "\(result.output)")
            #expect(!result.output.contains("FILE-SECRET"))
        }
        #expect(origin.requests().isEmpty, "nothing was requested with a refused secret")
        #expect(!FileManager.default.fileExists(atPath: dir.file("x.bin")))
    }

    @Test func theQueueKeepsTheCredentialPrivateAndListsTheURLWithoutIt() async throws {
        let state = try ScratchDirectory()
        let stateDirectory = state.file("queue")
        let dir = try ScratchDirectory()
        let url = "http://u:PASS@127.0.0.1:9/f.bin?sig=SIGNATURE"
        let added = try await secretsCLI(["queue", "--state", stateDirectory, "add", url, "-o", dir.file("f.bin")], in: dir)
        #expect(added.exitCode == 0, "\(added.output)")
        let again = try await secretsCLI(["queue", "--state", stateDirectory, "add", url, "-o", dir.file("f.bin")], in: dir)
        #expect(!again.output.contains("PASS"), "\(again.output)")
        for arguments in [["list"], ["list", "--json"]] {
            let listed = try await secretsCLI(["queue", "--state", stateDirectory] + arguments, in: dir)
            #expect(listed.exitCode == 0, "\(listed.output)")
            #expect(listed.output.contains("u:***@127.0.0.1:9") && listed.output.contains("f.bin?sig=SIGNATURE"), "\(listed.output)")
            #expect(!listed.output.contains("PASS"), "\(listed.output)")
        }
        // The store keeps the credential (the task needs it), private to the user.
        var status = stat()
        #expect(stat(stateDirectory, &status) == 0 && status.st_mode & 0o777 == 0o700)
        for name in try FileManager.default.contentsOfDirectory(atPath: stateDirectory) where name.hasPrefix("tasks.sqlite") {
            #expect(stat(stateDirectory + "/" + name, &status) == 0)
            #expect(status.st_mode & 0o077 == 0, "\(name) is mode \(String(status.st_mode & 0o777, radix: 8))")
        }
    }

    @Test func anExistingWorldReadableTaskStoreIsTightened() async throws {
        let state = try ScratchDirectory()
        let dir = try ScratchDirectory()
        let database = state.file("tasks.sqlite")
        #expect(FileManager.default.createFile(atPath: database, contents: nil))
        chmod(database, 0o644)
        let added = try await secretsCLI(
            ["queue", "--state", state.path, "add", "http://u:PASS@127.0.0.1:9/g.bin", "-o", dir.file("g.bin")], in: dir)
        #expect(added.exitCode == 0, "\(added.output)")
        for name in try FileManager.default.contentsOfDirectory(atPath: state.path) where name.hasPrefix("tasks.sqlite") {
            var status = stat()
            #expect(stat(state.file(name), &status) == 0)
            #expect(status.st_mode & 0o077 == 0, "\(name) is mode \(String(status.st_mode & 0o777, radix: 8))")
        }
    }
}
