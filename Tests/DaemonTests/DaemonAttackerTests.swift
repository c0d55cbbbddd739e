import DownloadKitDaemon
import DownloadKitSession
import Foundation
import Testing
import TestOrigin

/// Issue #44, items 10 and 11: a daemon that clients of its own uid cannot exhaust (connections,
/// descriptors, buffered bytes, slow and idle connections), and clients that talk only to a daemon of
/// their own uid (a fake daemon of another user on the socket path receives nothing).
@Suite(.timeLimit(.minutes(3)))
struct DaemonAttackerTests {
    // MARK: - Measuring the daemon

    /// User plus system CPU seconds the process has used (`/proc/PID/stat`).
    static func cpuSeconds(_ pid: pid_t) -> Double? {
        guard let fields = processStatFields(pid), fields.count > 12, let user = Double(fields[11]), let system = Double(fields[12])
        else { return nil }
        return (user + system) / Double(sysconf(Int32(_SC_CLK_TCK)))
    }

    /// A `kB` line of `/proc/PID/status` (`VmRSS`, `VmHWM`) in bytes.
    static func status(_ pid: pid_t, _ key: String) -> Int? {
        guard let text = try? String(contentsOfFile: "/proc/\(pid)/status", encoding: .utf8) else { return nil }
        for line in text.split(separator: "\n") where line.hasPrefix(key + ":") {
            return line.split(separator: " ").dropFirst().first.flatMap { Int($0) }.map { $0 * 1024 }
        }
        return nil
    }

    /// CPU seconds the daemon uses over `seconds` of wall time.
    static func cpuUsed(_ pid: pid_t, over seconds: Double) async throws -> Double {
        let before = try #require(cpuSeconds(pid))
        try await Task.sleep(nanoseconds: UInt64(seconds * 1e9))
        return try #require(cpuSeconds(pid)) - before
    }

    // MARK: - Raw connections

    /// A non-blocking connection (nil when nothing listens, or the listener's backlog stays full for a
    /// second).
    static func rawConnect(_ path: String) -> Int32? {
        for _ in 0..<100 {
            if let fd = rawConnectOnce(path) { return fd }
            guard errno == EAGAIN else { return nil }
            usleep(10_000)
        }
        return nil
    }

    private static func rawConnectOnce(_ path: String) -> Int32? {
        guard var address = UnixSocket.address(path) else { return nil }
        let fd = socket(AF_UNIX, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_NONBLOCK.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
        guard fd >= 0 else { return nil }
        let result = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { connect(fd, $0, socklen_t(MemoryLayout<sockaddr_un>.size)) }
        }
        guard result == 0 else {
            let error = errno
            close(fd)
            errno = error
            return nil
        }
        return fd
    }

    /// The frames already received on a non-blocking descriptor, and whether it saw EOF (or a reset).
    static func receivedSoFar(_ fd: Int32) -> (messages: [ServerMessage], closed: Bool) {
        var decoder = FrameDecoder()
        var buffer = [UInt8](repeating: 0, count: 65536)
        var closed = false
        while true {
            let count = buffer.withUnsafeMutableBytes { recv(fd, $0.baseAddress, $0.count, Int32(MSG_DONTWAIT)) }
            if count > 0 {
                decoder.append(buffer[0..<count])
                continue
            }
            closed = count == 0 || errno == ECONNRESET
            break
        }
        var messages: [ServerMessage] = []
        while case .frame(let body) = decoder.next() {
            if let message = try? SessionCodec.decodeServer(body) { messages.append(message) }
        }
        return (messages, closed)
    }

    static func error(_ messages: [ServerMessage]) -> SessionError? {
        for case .error(_, let error) in messages { return error }
        return nil
    }

    /// Runs `session ID list` until it succeeds (bounded); returns the seconds it took, or nil.
    static func servedWithin(_ harness: DaemonHarness, seconds: Double) async throws -> Double? {
        let start = Date()
        while Date().timeIntervalSince(start) < seconds {
            if try await harness.session("legit", ["list", "--json"], timeout: 10).status == 0 {
                return Date().timeIntervalSince(start)
            }
            try await Task.sleep(nanoseconds: 200_000_000)
        }
        return nil
    }

    // MARK: - Configuration

    @Test func limitOptionsAreAppliedAndBadValuesNameTheOption() throws {
        let parsed = try DaemonArguments.parse([
            "--max-connections", "7", "--max-buffered-bytes", "2000000", "--frame-timeout", "0.5", "--idle-timeout", "90",
        ])
        let limits = try parsed.limits()
        #expect(limits.maxConnections == 7 && limits.maxBufferedBytes == 2_000_000)
        #expect(limits.frameTimeout == 0.5 && limits.idleTimeout == 90)
        #expect(ControlServer.Limits().connectionCap(descriptorLimit: 80) == 40)
        #expect(ControlServer.Limits().connectionCap(descriptorLimit: 1 << 20) == 128)
        for (option, value) in [("--max-connections", "0"), ("--max-buffered-bytes", "1000"), ("--frame-timeout", "0"), ("--idle-timeout", "-1")] {
            do {
                _ = try DaemonArguments.parse([option, value])
                Issue.record("\(option) \(value) was accepted")
            } catch {
                #expect(DaemonArguments.message(for: error).contains(option), "\(DaemonArguments.message(for: error))")
            }
        }
    }

    // MARK: - Connections and descriptors

    @Test func connectionsBeyondTheCapAreRefusedAtOnceAndTheDaemonDoesNotSpin() async throws {
        let prlimit = try #require(ProcessRunner.findExecutable("prlimit"), "prlimit (util-linux) is needed")
        let harness = try DaemonHarness()
        // 80 descriptors: the cap is 40 connections (half the descriptors).
        // A frame timeout far longer than the checks below take: on a loaded machine (the whole suite on two
        // cores) the cooperative pool resumed this test seconds late, the held 40 were dropped at 8 s, and
        // the late connection below was then accepted instead of refused (CI of the issue #44 merge).
        try await harness.start(prefix: [prlimit, "--nofile=80:80", "--"], options: ["--frame-timeout", "25"])
        let pid = try #require(harness.daemonPID)
        let path = harness.socketPath
        let fds = (0..<120).compactMap { _ in Self.rawConnect(path) }
        defer { for fd in fds { close(fd) } }
        try await Task.sleep(nanoseconds: 300_000_000)
        let used = try await Self.cpuUsed(pid, over: 2)
        #expect(used < 0.5, "the daemon used \(used) s of CPU in 2 s with 120 connections open (issue #44: 100 %)")
        // Beyond the cap each newcomer was told why, and closed.
        let answers = fds.map(Self.receivedSoFar)
        let refused = answers.filter { Self.error($0.messages)?.code == .overloaded && $0.closed }
        #expect(fds.count == 120, "\(120 - fds.count) connections could not even be made (the backlog was full)")
        #expect(refused.count >= 80, "only \(refused.count) of \(fds.count) connections were refused with overloaded\n\(harness.daemonLog)")
        #expect(refused.contains { Self.error($0.messages)?.detail.contains("at most 40 connections") == true })
        // While the 40 are held, one more is answered at once too.
        let late = try #require(Self.rawConnect(path))
        defer { close(late) }
        var lateAnswer = Self.receivedSoFar(late)
        for _ in 0..<100 where lateAnswer.messages.isEmpty && !lateAnswer.closed {  // a bound, not a measure
            try await Task.sleep(nanoseconds: 50_000_000)
            lateAnswer = Self.receivedSoFar(late)
        }
        #expect(Self.error(lateAnswer.messages)?.code == .overloaded, "\(lateAnswer)\n\(harness.daemonLog)")
        // The silent 40 are dropped after the frame timeout; a legitimate client is then served.
        let served = try await Self.servedWithin(harness, seconds: 60)
        #expect(served != nil, "a legitimate client was not served\n\(harness.daemonLog)")
        #expect(harness.daemonLog.contains("no hello within 25 s"))
        #expect(try await harness.stop() == 0)
    }

    @Test func outOfDescriptorsTheListenerDoesNotSpin() async throws {
        let prlimit = try #require(ProcessRunner.findExecutable("prlimit"), "prlimit (util-linux) is needed")
        let harness = try DaemonHarness()
        try await harness.start(options: ["--frame-timeout", "4", "--max-connections", "200"])
        let pid = try #require(harness.daemonPID)
        // Fewer descriptors than the connection cap (computed at start) needs: accept hits EMFILE.
        let lowered = try await offloaded { try ProcessRunner.run(prlimit, ["--pid", "\(pid)", "--nofile=40:40"]) }
        #expect(lowered.succeeded, "\(lowered.output)")
        let path = harness.socketPath
        let fds = (0..<120).compactMap { _ in Self.rawConnect(path) }
        // Each closed once, below or (after a thrown error) here: a second close(2) of a number the process
        // has reused closes another test's socket (closecheck in Scripts/test.sh).
        var open = fds
        defer { for fd in open { close(fd) } }
        try await Task.sleep(nanoseconds: 300_000_000)
        let used = try await Self.cpuUsed(pid, over: 2)
        #expect(used < 0.5, "the daemon used \(used) s of CPU in 2 s out of descriptors (issue #44: 100 %)")
        let answers = fds.map(Self.receivedSoFar)
        let outOfDescriptors = answers.filter {
            Self.error($0.messages)?.detail.contains("out of file descriptors") == true && $0.closed
        }
        #expect(
            outOfDescriptors.count >= 60,
            "\(outOfDescriptors.count) of \(fds.count) were told the daemon is out of descriptors; the others: \(answers.map { "\(Self.error($0.messages).map(\.detail) ?? "-") \($0.closed)" })\n\(harness.daemonLog)")
        for fd in open { close(fd) }
        open = []
        let served = try await Self.servedWithin(harness, seconds: 20)
        #expect(served != nil, "a legitimate client was not served\n\(harness.daemonLog)")
        #expect(try await harness.stop() == 0)
    }

    // MARK: - Buffered bytes

    @Test func partialFramesOfManyClientsCostBoundedMemoryGivenBack() async throws {
        let harness = try DaemonHarness()
        try await harness.start()
        let pid = try #require(harness.daemonPID)
        let baseline = try #require(Self.status(pid, "VmRSS"))
        // 300 clients each send a 1 MiB frame but its last byte (issue #44: 294 MB resident, kept).
        let path = harness.socketPath
        let fds = try await offloaded { () -> [Int32] in
            let body = SessionProtocol.maxFrameBytes
            let partial = [UInt8(body >> 24), UInt8((body >> 16) & 0xFF), UInt8((body >> 8) & 0xFF), UInt8(body & 0xFF)]
                + [UInt8](repeating: 0x20, count: body - 1)
            var fds: [Int32] = []
            for _ in 0..<300 {
                guard case .success(let fd) = UnixSocket.connect(path) else { continue }
                fds.append(fd)
                var timeout = timeval(tv_sec: 5, tv_usec: 0)
                setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
                var offset = 0
                while offset < partial.count {
                    let sent = partial[offset...].withUnsafeBytes { send(fd, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) }
                    if sent <= 0 { break }
                    offset += sent
                }
            }
            return fds
        }
        var open = fds  // each closed once: below, or here after a thrown error
        defer { for fd in open { close(fd) } }
        try await Task.sleep(nanoseconds: 500_000_000)
        let peak = try #require(Self.status(pid, "VmHWM"))
        let held = try #require(Self.status(pid, "VmRSS"))
        #expect(peak - baseline < 120 << 20, "peak RSS \(peak >> 20) MiB, baseline \(baseline >> 20) MiB\n\(harness.daemonLog)")
        #expect(try await Self.servedWithin(harness, seconds: 10) != nil, "\(harness.daemonLog)")
        for fd in open { close(fd) }
        open = []
        try await Task.sleep(nanoseconds: 2_500_000_000)
        let after = try #require(Self.status(pid, "VmRSS"))
        #expect(
            after - baseline < 24 << 20,
            "RSS \(after >> 20) MiB after the clients left (held \(held >> 20) MiB, baseline \(baseline >> 20) MiB)")
        #expect(try await harness.stop() == 0)
    }

    // MARK: - Slow and idle clients

    @Test func aPartialFrameIsDroppedAfterTheFrameTimeoutAndTheDaemonServesOn() async throws {
        let harness = try DaemonHarness()
        try await harness.start(options: ["--frame-timeout", "1"])
        let client = try DaemonSocketTests.RawClient(harness.socketPath)
        client.send(ClientMessage(id: 0, .hello(version: SessionProtocol.version, session: "slow")))
        guard case .welcome = client.next() else {
            Issue.record("no welcome\n\(harness.daemonLog)")
            return
        }
        client.send([0, 0, 0, 100] + [UInt8](repeating: 0x20, count: 10))
        let start = Date()
        let (messages, closed) = client.readAll()
        let elapsed = Date().timeIntervalSince(start)
        #expect(closed && elapsed < 5, "closed: \(closed) after \(elapsed) s")
        #expect(DaemonSocketTests.errorCode(messages) == .overloaded, "\(messages)")
        #expect(try await harness.session("slow", ["list"]).status == 0)
        #expect(try await harness.stop() == 0)
    }

    @Test func silentAndIdleConnectionsAreClosedAndASubscriberStays() async throws {
        let harness = try DaemonHarness()
        try await harness.start(options: ["--frame-timeout", "1", "--idle-timeout", "2"])
        let silent = try DaemonSocketTests.RawClient(harness.socketPath)
        let idle = try DaemonSocketTests.RawClient(harness.socketPath)
        let subscriber = try DaemonSocketTests.RawClient(harness.socketPath)
        for (client, name) in [(idle, "idle"), (subscriber, "subscriber")] {
            client.send(ClientMessage(id: 0, .hello(version: SessionProtocol.version, session: name)))
            guard case .welcome = client.next() else {
                Issue.record("no welcome for \(name)\n\(harness.daemonLog)")
                return
            }
        }
        subscriber.send(ClientMessage(id: 1, .subscribe(after: 0)))
        guard case .ok = subscriber.next() else {
            Issue.record("no ok for the subscription")
            return
        }
        let start = Date()
        let silentEnd = silent.readAll()
        let silentAfter = Date().timeIntervalSince(start)
        #expect(silentEnd.closed && silentAfter < 4, "silent: closed \(silentEnd.closed) after \(silentAfter) s")
        #expect(DaemonSocketTests.errorCode(silentEnd.messages) == .overloaded)
        let idleEnd = idle.readAll()
        let idleAfter = Date().timeIntervalSince(start)
        #expect(idleEnd.closed && idleAfter < 6, "idle: closed \(idleEnd.closed) after \(idleAfter) s")
        #expect(DaemonSocketTests.errorCode(idleEnd.messages) == .overloaded)
        // The subscriber, as silent as the idle one, is still served.
        try await Task.sleep(nanoseconds: 1_000_000_000)
        subscriber.send(ClientMessage(id: 2, .list))
        guard case .ok(let id, _, _, _) = subscriber.next() else {
            Issue.record("the subscriber was dropped\n\(harness.daemonLog)")
            return
        }
        #expect(id == 2)
        #expect(try await harness.stop() == 0)
    }

    // MARK: - The client and a daemon of another user

    /// A fake daemon: listens on argv[1], appends every byte it receives to argv[2], counts its
    /// connections in argv[2].accepts, answers the first frame with a welcome (so a client that talks to
    /// it sends its requests next) and closes a connection after 2 s of silence.
    static let fakeDaemon = """
        import socket, sys
        path, record = sys.argv[1], sys.argv[2]
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.bind(path)
        s.listen(8)
        while True:
            c, _ = s.accept()
            with open(record + ".accepts", "a") as f: f.write("1\\n")
            c.settimeout(2)
            data, answered = b"", False
            try:
                while True:
                    chunk = c.recv(65536)
                    if not chunk: break
                    with open(record, "ab") as f: f.write(chunk)
                    data += chunk
                    if not answered and len(data) >= 4 and len(data) >= 4 + int.from_bytes(data[:4], "big"):
                        answered = True
                        body = b'{"type":"welcome","version":1,"session":"x","acknowledged":0}'
                        c.sendall(len(body).to_bytes(4, "big") + body)
            except Exception:
                pass
            c.close()
        """

    /// Where the fake daemon's socket is and what the client is pointed at.
    enum Plant: String, CaseIterable, Sendable {
        /// The socket path's directory belongs to the other user.
        case othersDirectory
        /// Our own directory, but sticky and world-writable (like /tmp).
        case stickyWorldWritable
        /// Root's directory, group-writable by the other user's group (0775 root:nogroup; the kernel never
        /// protects these, whatever fs.protected_* say).
        case groupWritable
        /// The path goes through a symbolic link to the other user's directory.
        case symlinkedDirectory
        /// The other user's listening socket hard-linked into our own 0700 directory: only SO_PEERCRED
        /// on the connection can tell.
        case linkedIntoOurDirectory
    }

    @Test(arguments: Plant.allCases)
    func aFakeDaemonOfAnotherUserReceivesNothing(_ plant: Plant) async throws {
        let setpriv = try #require(ProcessRunner.findExecutable("setpriv"), "setpriv (util-linux) is needed")
        try #require(geteuid() == 0, "this test plays uid 65534, which needs root (CI runs as root)")
        let scratch = try ScratchDirectory()
        let python = "/usr/bin/python3"  // not a pyenv shim under /root, which uid 65534 cannot read
        // The other user's directory, where its fake daemon binds and records.
        let theirs = scratch.file("theirs")
        var fakeDirectory = theirs
        try FileManager.default.createDirectory(atPath: theirs, withIntermediateDirectories: false)
        chown(theirs, 65534, 65534)
        chmod(theirs, 0o700)
        switch plant {
        case .stickyWorldWritable:
            fakeDirectory = scratch.file("tmp")
            try FileManager.default.createDirectory(atPath: fakeDirectory, withIntermediateDirectories: false)
            chmod(fakeDirectory, 0o1777)
        case .groupWritable:
            fakeDirectory = scratch.file("shared")
            try FileManager.default.createDirectory(atPath: fakeDirectory, withIntermediateDirectories: false)
            chown(fakeDirectory, 0, 65534)
            chmod(fakeDirectory, 0o775)
        default:
            break
        }
        let fakeSocket = fakeDirectory + "/d.sock"
        let record = theirs + "/received"
        let fake = try ChildProcess(
            setpriv, ["--reuid=65534", "--regid=65534", "--clear-groups", "--", python, "-c", Self.fakeDaemon, fakeSocket, record],
            outputPath: scratch.file("fake.log"))
        defer { fake.terminate(grace: 1) }
        var info = stat()
        for _ in 0..<500 where lstat(fakeSocket, &info) != 0 { usleep(10_000) }
        #expect(lstat(fakeSocket, &info) == 0 && info.st_uid == 65534, "the fake daemon did not bind \(fakeSocket)")
        let target: String
        switch plant {
        case .othersDirectory, .stickyWorldWritable, .groupWritable:
            target = fakeSocket
        case .symlinkedDirectory:
            symlink(theirs, scratch.file("run"))
            target = scratch.file("run/d.sock")
        case .linkedIntoOurDirectory:
            let ours = scratch.file("run")
            try FileManager.default.createDirectory(atPath: ours, withIntermediateDirectories: false)
            chmod(ours, 0o700)
            target = ours + "/d.sock"
            #expect(link(fakeSocket, target) == 0, "link: \(String(cString: strerror(errno)))")
        }
        // Root's `session add` with a bearer token (issue #44, item 11).
        let harness = try DaemonHarness()
        let run = try await harness.session(
            "x", ["add", "http://127.0.0.1:9/x.bin", "-o", scratch.file("x.bin"), "--header", "Authorization: Bearer s3cret"],
            socket: target, timeout: 30)
        #expect(run.status != 0)
        let expected: String
        switch plant {
        case .othersDirectory, .symlinkedDirectory: expected = plant == .symlinkedDirectory ? "is a symbolic link" : "owned by uid 65534"
        case .stickyWorldWritable, .groupWritable: expected = "writable by other users"
        case .linkedIntoOurDirectory: expected = "served by uid 65534"
        }
        #expect(run.stderr.hasPrefix("error:") && run.stderr.contains(target) && run.stderr.contains(expected), "\(run.stderr)")
        // The library client: the same refusal, typed.
        let session = BackgroundSession(identifier: "x", socketPath: target)
        defer { session.close() }
        do {
            _ = try await session.list()
            Issue.record("the session talked to the fake daemon")
        } catch {
            #expect(error.code == .permissionDenied && error.detail.contains(target) && error.detail.contains(expected), "\(error)")
        }
        try await Task.sleep(nanoseconds: 300_000_000)
        let received = FileManager.default.contents(atPath: record) ?? Data()
        #expect(received.isEmpty, "the fake daemon received \(received.count) bytes: \(String(decoding: received, as: UTF8.self))")
        if plant != .linkedIntoOurDirectory {
            #expect(!FileManager.default.fileExists(atPath: record + ".accepts"), "the client connected to the fake daemon")
        }
    }
}
