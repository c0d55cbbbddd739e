import DownloadKit
import Foundation
import Glibc
import HTTPClient
import Testing
import TestOrigin

// Happy Eyeballs (RFC 8305) against a black-holed IPv6 address that comes first, in network
// namespaces the tests create (CI runs as root): `lo` up, fd00:dead::5 on `lo`, and an nftables
// rule that drops (and counts) every SYN to it, so a connect there hangs as it does behind a broken
// IPv6 route. No timed assertions: the evidence is which attempt connected, which was abandoned,
// and how many SYNs the rule dropped.

private let blackHole = "fd00:dead::5"

/// nftables rules dropping SYNs to the black hole, with a named counter.
private let dropRules = """
    table inet dkhe {
      counter dropped_syn { }
      chain out {
        type filter hook output priority 0; policy accept;
        ip6 daddr \(blackHole) tcp flags & (syn | ack) == syn counter name "dropped_syn" drop
      }
    }

    """

/// Runs a program from the calling thread (so it inherits that thread's network namespace) and
/// returns its exit status and output.
private func runHere(_ name: String, _ arguments: [String], scratch: ScratchDirectory) throws -> (Int32, String) {
    let path = try #require(ProcessRunner.findExecutable(name), "\(name) missing: run Scripts/install-deps.sh")
    let log = scratch.file("\(name)-\(UUID().uuidString).log")
    let child = try ChildProcess(path, arguments, outputPath: log)
    let status = child.waitForExit(timeout: 30)
    let output = (try? String(contentsOfFile: log, encoding: .utf8)) ?? ""
    guard let status else {
        child.terminate(grace: 1)
        throw OriginError("running \(name)", detail: "did not finish in 30 s: \(output)")
    }
    return (WaitStatus(status).exitCode, output)
}

/// `unshare(CLONE_NEWNET)`, looked up at run time (Glibc's Swift module does not export `unshare`).
private func unshareNetwork() -> Int32 {
    typealias Unshare = @convention(c) (Int32) -> Int32
    guard let handle = dlopen(nil, RTLD_NOW), let symbol = dlsym(handle, "unshare") else {
        errno = ENOSYS
        return -1
    }
    return unsafeBitCast(symbol, to: Unshare.self)(0x4000_0000)  // CLONE_NEWNET
}

/// `packets N` from `nft list counter inet dkhe dropped_syn`.
private func droppedSYNs(_ listing: String) -> Int? {
    guard let range = listing.range(of: "packets ") else { return nil }
    return Int(listing[range.upperBound...].prefix { $0.isNumber })
}

@Suite(.timeLimit(.minutes(3)))
struct HappyEyeballsNamespaceTests {
    /// The library: on a thread moved into its own network namespace, `Connection.connect` to a host
    /// resolving to [black-holed IPv6, 127.0.0.1] connects over IPv4 and abandons the IPv6 attempt.
    @Test func blackHoledIPv6FirstFallsBackToIPv4AndAbandonsTheLoser() async throws {
        let scratch = try ScratchDirectory()
        try dropRules.write(toFile: scratch.file("rules.nft"), atomically: true, encoding: .utf8)
        let (attempts, listing) = try await offloaded { () throws -> ([ConnectAttempt], String) in
            // unshare(CLONE_NEWNET) moves only this thread (and the processes it spawns) into a new
            // namespace; the thread ends with the test, and the namespace with it.
            guard unshareNetwork() == 0 else {
                throw OriginError("unshare(CLONE_NEWNET)", errno: errno, detail: String(cString: strerror(errno)))
            }
            for command in [
                ("ip", ["link", "set", "lo", "up"]), ("ip", ["-6", "addr", "add", "\(blackHole)/128", "dev", "lo", "nodad"]),
                ("nft", ["-f", scratch.file("rules.nft")]),
            ] {
                let (status, output) = try runHere(command.0, command.1, scratch: scratch)
                guard status == 0 else { throw OriginError("\(command.0) \(command.1)", detail: output) }
            }
            // A listener on 127.0.0.1 in this namespace: the kernel completes handshakes for it.
            guard let listener = loopbackSocket(port: 8080, listening: true) else {
                throw OriginError("listen in the namespace", errno: errno)
            }
            defer { close(listener) }

            let connection = try Connection.connect(
                host: "he.test", port: 8080, tls: nil, serverName: nil, deadline: .after(seconds: 30),
                options: ConnectOptions(addressOverride: [blackHole, "127.0.0.1"]))
            let attempts = connection.connectAttempts
            connection.close()
            let (_, listing) = try runHere("nft", ["list", "counter", "inet", "dkhe", "dropped_syn"], scratch: scratch)
            return (attempts, listing)
        }
        #expect(attempts.map { $0.family } == [AddressFamily.ipv6, .ipv4], "IPv6 first, then IPv4: \(attempts)")
        #expect(attempts.map { $0.outcome } == [ConnectAttempt.Outcome.abandoned, .connected], "\(attempts)")
        #expect(attempts.first?.address == "[\(blackHole)]:8080")
        #expect((droppedSYNs(listing) ?? 0) >= 1, "the IPv6 SYN was really sent and dropped: \(listing)")
    }

    /// The CLI: in a namespace with its own /etc/hosts (he.test → black hole and 127.0.0.1) and nginx
    /// on 127.0.0.1, a segmented download succeeds over IPv4; the IPv6 SYN is dropped once: the
    /// family that won is tried first by the later connections (segments), which then never wait.
    @Test func segmentedCLIDownloadOverABlackHoledIPv6FirstHost() async throws {
        let executable = try #require(CLITests.executable, "downloadkit not built")
        let nginx = try #require(NginxServer.locate(), "nginx missing: run Scripts/install-deps.sh")
        let scratch = try ScratchDirectory()
        let dir = scratch.path
        let size = 9 << 20
        let seed: UInt64 = 0x4E
        try FileManager.default.createDirectory(atPath: dir + "/www", withIntermediateDirectories: true)
        try FileManager.default.createDirectory(atPath: dir + "/tmp", withIntermediateDirectories: true)
        try await offloaded {
            try Data(TestPattern.bytes(offset: 0, count: size, seed: seed)).write(to: URL(fileURLWithPath: dir + "/www/file.bin"))
        }
        try dropRules.write(toFile: dir + "/rules.nft", atomically: true, encoding: .utf8)
        try "\(blackHole) he.test\n127.0.0.1 he.test\n127.0.0.1 localhost\n"
            .write(toFile: dir + "/hosts", atomically: true, encoding: .utf8)
        let temp = ["client_body", "proxy", "fastcgi", "uwsgi", "scgi"].map { "\($0)_temp_path \(dir)/tmp;" }.joined(separator: " ")
        try """
            daemon off; master_process off; worker_processes 1; pid \(dir)/nginx.pid; error_log \(dir)/error.log;
            events { worker_connections 64; }
            http {
                log_format he '$remote_addr $connection $status "$http_range"';
                access_log \(dir)/access.log he;
                \(temp)
                server { listen 127.0.0.1:8080; root \(dir)/www; }
            }

            """.write(toFile: dir + "/nginx.conf", atomically: true, encoding: .utf8)
        try """
            set -u
            ip link set lo up && ip -6 addr add \(blackHole)/128 dev lo nodad && nft -f \(dir)/rules.nft || exit 90
            mount --bind \(dir)/hosts /etc/hosts || exit 91
            \(nginx) -p \(dir)/ -c \(dir)/nginx.conf -e \(dir)/error.log &
            server=$!
            for i in $(seq 200); do (exec 3<>/dev/tcp/127.0.0.1/8080) 2>/dev/null && break; sleep 0.05; done
            \(executable) get http://he.test:8080/file.bin -o \(dir)/out.bin --connections 3 --progress none
            status=$?
            nft list counter inet dkhe dropped_syn > \(dir)/counter.txt
            kill $server; wait $server
            exit $status
            """.write(toFile: dir + "/run.sh", atomically: true, encoding: .utf8)

        // unshare -n -m: a new network namespace and a private mount namespace for the hosts file;
        // both end with the script.
        let (status, output) = try await offloaded {
            try runHere("unshare", ["-n", "-m", "bash", dir + "/run.sh"], scratch: scratch)
        }
        #expect(status == 0, "\(output)\n\((try? String(contentsOfFile: dir + "/error.log", encoding: .utf8)) ?? "")")
        #expect(try await offloaded { fileMatchesPattern(dir + "/out.bin", size: Int64(size), seed: seed) })
        let log = (try? String(contentsOfFile: dir + "/access.log", encoding: .utf8)) ?? ""
        let lines = log.split(separator: "\n")
        #expect(lines.count >= 2 && lines.allSatisfy { $0.hasPrefix("127.0.0.1 ") }, "all requests over IPv4: \(log)")
        #expect(Set(lines.map { $0.split(separator: " ")[1] }).count >= 2, "several connections (segments): \(log)")
        let listing = (try? String(contentsOfFile: dir + "/counter.txt", encoding: .utf8)) ?? ""
        #expect(droppedSYNs(listing) == 1, "one IPv6 SYN for the first connection only; later ones went IPv4 first: \(listing)")
    }

    /// `-4` and `-6` restrict the families the CLI may use, with an error that says what is missing.
    @Test func addressFamilyFlagsRestrictTheCLI() async throws {
        let origin = try FaultOrigin()  // listens on 127.0.0.1 only
        origin.serve("/f.bin", .resource(Resource(size: 64 << 10, seed: 5)))
        let dir = try ScratchDirectory()
        let v4 = try await ProxyTests.runCLI(
            ["get", "http://localhost:\(origin.port)/f.bin", "-o", dir.file("f.bin"), "-4", "--progress", "none"], in: dir)
        #expect(v4.exitCode == 0, "\(v4.output)")
        #expect(fileMatchesPattern(dir.file("f.bin"), size: 64 << 10, seed: 5))
        let v6 = try await ProxyTests.runCLI(
            ["get", origin.url("/f.bin"), "-o", dir.file("g.bin"), "-6", "--progress", "none", "--retries", "0"], in: dir)
        #expect(v6.exitCode == 4 && v6.output.contains("127.0.0.1 has no IPv6 address"), "\(v6.output)")
        let both = try await ProxyTests.runCLI(["get", origin.url("/f.bin"), "-4", "-6"], in: dir)
        #expect(both.exitCode == 64, "\(both.output)")
    }
}
