import Foundation
import Testing
import TestOrigin

/// Power cuts (issue #20, after ALICE and CrashMonkey): a clean `downloadkit get` runs under the faultfs
/// shim with FAULTFS_LOG set, which records every open, write (offset, length, data), ftruncate,
/// fallocate, fsync/fdatasync, rename and unlink in the download's directory, in order. ``CrashModel``
/// replays that log and, at a set of cut points, builds the states a power cut could leave: all synced
/// data kept; each file's writes since its last fsync dropped, kept, or kept as a prefix (the first
/// half); names created, renamed or unlinked since the last directory fsync either all undone or all
/// kept. Each distinct state is written into a fresh directory and `downloadkit get` is rerun on it, as
/// on the next boot (``FaultFS/rebootedRun(_:timeout:)``): it must end with exit status 0 and the right bytes, and in no case report success with
/// a wrong file. The cut points are every op boundary around an fsync, rename, unlink or open, and every
/// 5th write (`DOWNLOADKIT_FAULTFS_ALL=1`: every op).
@Suite(.timeLimit(.minutes(10)), .serialized)
struct PowerCutTests {
    static let size = 2 << 20

    func explore(connections: Int, seed: UInt64) async throws {
        let origin = try FaultOrigin()
        // Recorded at 1 MiB/s (about 2 s: periodic checkpoints happen during it); the reruns are served
        // at full speed.
        origin.serve("/p.bin", .resource(Resource(size: Int64(Self.size), seed: seed, bytesPerSecond: 1 << 20)))
        let url = origin.url("/p.bin")
        let extra = connections > 1 ? ["--connections", "\(connections)"] : []
        let recording = try ScratchDirectory()
        let log = recording.path + "/../powercut-\(UUID().uuidString).log"
        defer {
            try? FileManager.default.removeItem(atPath: log)
            try? FileManager.default.removeItem(atPath: log + ".data")
        }
        let clean = try await offloaded {
            try FaultFS.run(["get", url, "-o", recording.file("p.bin"), "--progress", "none"] + extra, watching: recording.path, log: log)
        }
        #expect(clean.exitCode == 0, "recorded run: \(clean.output)")
        #expect(fileMatchesPattern(recording.file("p.bin"), size: Int64(Self.size), seed: seed))
        origin.serve("/p.bin", .resource(Resource(size: Int64(Self.size), seed: seed)))
        let model = try CrashModel(log: log, directory: recording.path)
        try #require(model.operations.count > 3, "the log holds \(model.operations.count) operations")
        // The recording itself first: replayed to its end it must be the file the run left. A write the shim
        // did not see would otherwise show below as the engine's fault in every later crash state.
        let replayed = try #require(model.replayedFiles()["p.bin"], "the replay has no p.bin: \(model.replayedFiles().keys.sorted())")
        try #require(
            replayed == [UInt8](try Data(contentsOf: URL(fileURLWithPath: recording.file("p.bin")))),
            "the recording missed some of the run's writes: its replay differs from the downloaded file")
        let states = model.crashStates(everyOp: ProcessInfo.processInfo.environment["DOWNLOADKIT_FAULTFS_ALL"] == "1", writeStride: 5)
        print("PowerCutTests: connections \(connections): \(model.operations.count) logged operations, \(states.count) distinct crash states")
        var failures: [String] = []
        var guardrail = FaultFS.SweepGuard()
        for state in states {
            let dir = try ScratchDirectory()
            for (name, bytes) in state.files {
                try Data(bytes).write(to: URL(fileURLWithPath: dir.file(name)))
            }
            let arguments = ["get", url, "-o", dir.file("p.bin"), "--progress", "none"] + extra
            let rerun = try await offloaded { try FaultFS.rebootedRun(arguments) }
            let right = fileMatchesPattern(dir.file("p.bin"), size: Int64(Self.size), seed: seed)
            if rerun.exitCode == 0 && !right {
                failures.append("WRONG FILE REPORTED COMPLETE after cut \(state.description): \(rerun.output.suffix(300))")
            } else if rerun.exitCode != 0 || !right {
                failures.append("cut \(state.description): rerun exit \(rerun.exitCode): \(rerun.output.suffix(300))")
            }
            try? FileManager.default.removeItem(atPath: dir.path)
            if let reason = guardrail.stopReason(after: rerun) {
                failures.append("the sweep \(reason) (at cut \(state.description))")
                break
            }
        }
        print("PowerCutTests: connections \(connections): \(states.count) states rerun, \(failures.count) failed")
        for failure in failures.prefix(15) { Issue.record("connections \(connections): \(failure)") }
    }

    /// The recording follows a file opened again through `/proc/self/fd/N`, as the engine opens its `O_DIRECT`
    /// descriptor (``DirectFile``): the shim once left such a descriptor untracked, the replay lacked its
    /// writes, and a CI run under load reported the engine as completing wrong files.
    @Test func theRecordingFollowsAFileOpenedAgainThroughProc() throws {
        let directory = try ScratchDirectory()
        let log = directory.path + ".log"
        defer {
            try? FileManager.default.removeItem(atPath: log)
            try? FileManager.default.removeItem(atPath: log + ".data")
        }
        // python3 (install-deps.sh) calls open, write and pwrite as written; a shell would dup its descriptors.
        let script = """
            import os, sys
            fd = os.open(sys.argv[1], os.O_WRONLY | os.O_CREAT, 0o600)
            os.write(fd, b"abc")
            again = os.open("/proc/self/fd/%d" % fd, os.O_WRONLY)
            os.pwrite(again, b"def", 3)
            """
        let python = try #require(ProcessRunner.findExecutable("python3"), "python3 (Scripts/install-deps.sh) is not on PATH")
        let run = try FaultFS.run(["-c", script, directory.file("f")], program: python, watching: directory.path, log: log)
        #expect(run.exitCode == 0, "python3: \(run.output)")
        let written = try String(contentsOfFile: directory.file("f"), encoding: .utf8)
        #expect(written == "abcdef")
        let model = try CrashModel(log: log, directory: directory.path)
        #expect(model.replayedFiles()["f"].map { String(decoding: $0, as: UTF8.self) } == written)
    }

    /// The reruns run as after a reboot: the shim serves them a boot id of their own.
    @Test func aRerunAfterACutReadsANewBootID() throws {
        let library = try FaultFS.library.get()
        let python = try #require(ProcessRunner.findExecutable("python3"), "python3 (Scripts/install-deps.sh) is not on PATH")
        let directory = try ScratchDirectory()
        let read = "import sys; sys.stdout.write(open('/proc/sys/kernel/random/boot_id').read())"
        let child = try ChildProcess(
            "/usr/bin/env", ["LD_PRELOAD=\(library)", "FAULTFS_BOOT_ID=after-the-cut", python, "-c", read],
            outputPath: directory.file("out"))
        #expect(child.waitForExit(timeout: 30) == 0)
        #expect(try String(contentsOfFile: directory.file("out"), encoding: .utf8) == "after-the-cut\n")
        let real = try String(contentsOfFile: "/proc/sys/kernel/random/boot_id", encoding: .utf8)
        #expect(real != "after-the-cut\n" && !real.isEmpty)
    }

    @Test func singleConnectionPowerCuts() async throws {
        try await explore(connections: 1, seed: 3001)
    }

    @Test func fourConnectionPowerCuts() async throws {
        try await explore(connections: 4, seed: 3004)
    }

    /// The manager: `queue run` of one task recorded with the shim watching both the state directory
    /// (tasks.sqlite and its WAL) and the download directory; each crash state is written back into the
    /// same paths (the task row names its destination) and `queue run` rerun: the file must end
    /// byte-identical and `queue list` must say completed. `-shm` files are left out of every state
    /// (SQLite's shared-memory index is written through mmap, which the shim cannot see, and is rebuilt
    /// from the WAL when missing).
    @Test func managerPowerCuts() async throws {
        let seed: UInt64 = 3010
        let origin = try FaultOrigin()
        origin.serve("/m.bin", .resource(Resource(size: Int64(Self.size), seed: seed, bytesPerSecond: 1 << 20)))
        let root = try ScratchDirectory()
        let state = root.file("state"), out = root.file("out")
        for dir in [state, out] { try FileManager.default.createDirectory(atPath: dir, withIntermediateDirectories: true) }
        let add = ["queue", "--state", state, "add", origin.url("/m.bin"), "-o", out + "/m.bin"]
        let added = try await offloaded { try FaultFS.plainRun(add) }
        try #require(added.exitCode == 0, "\(added.output)")
        sync()
        let initial = try Self.tree(root.path)
        let log = root.path + "/../powercut-\(UUID().uuidString).log"
        defer {
            try? FileManager.default.removeItem(atPath: log)
            try? FileManager.default.removeItem(atPath: log + ".data")
        }
        let run = ["queue", "--state", state, "run", "--progress", "none"]
        let recorded = try await offloaded { try FaultFS.run(run, watching: root.path, log: log) }
        #expect(recorded.exitCode == 0, "recorded run: \(recorded.output)")
        #expect(fileMatchesPattern(out + "/m.bin", size: Int64(Self.size), seed: seed))
        origin.serve("/m.bin", .resource(Resource(size: Int64(Self.size), seed: seed)))
        let model = try CrashModel(log: log, directory: root.path, initial: initial)
        let states = model.crashStates(everyOp: ProcessInfo.processInfo.environment["DOWNLOADKIT_FAULTFS_ALL"] == "1", writeStride: 5)
        print("PowerCutTests: manager: \(model.operations.count) logged operations, \(states.count) distinct crash states")
        var failures: [String] = []
        var guardrail = FaultFS.SweepGuard()
        for crash in states {
            for dir in [state, out] {
                try? FileManager.default.removeItem(atPath: dir)
                try FileManager.default.createDirectory(atPath: dir, withIntermediateDirectories: true)
            }
            for (name, bytes) in crash.files where !name.hasSuffix("-shm") && name.contains("/") {
                try Data(bytes).write(to: URL(fileURLWithPath: root.file(name)))
            }
            let rerun = try await offloaded { try FaultFS.rebootedRun(run) }
            let right = fileMatchesPattern(out + "/m.bin", size: Int64(Self.size), seed: seed)
            let listed = try await offloaded { try FaultFS.plainRun(["queue", "--state", state, "list", "--json"]) }
            let tasks = (try? JSONSerialization.jsonObject(with: Data(listed.output.utf8))) as? [[String: Any]] ?? []
            if rerun.exitCode == 0 && !right {
                failures.append("WRONG FILE REPORTED COMPLETE after cut \(crash.description): \(rerun.output.suffix(300))")
            } else if rerun.exitCode != 0 || !right {
                failures.append("cut \(crash.description): rerun exit \(rerun.exitCode): \(rerun.output.suffix(300))")
            } else if tasks.count != 1 || tasks.first?["state"] as? String != "completed" {
                failures.append("cut \(crash.description): the store disagrees with the file: \(listed.output.suffix(300))")
            }
            if let reason = guardrail.stopReason(after: rerun, listed) {
                failures.append("the sweep \(reason) (at cut \(crash.description))")
                break
            }
        }
        print("PowerCutTests: manager: \(states.count) states rerun, \(failures.count) failed")
        for failure in failures.prefix(15) { Issue.record("manager: \(failure)") }
    }

    /// Every regular file under `root`: relative name → (inode, contents).
    static func tree(_ root: String) throws -> [String: (ino: UInt64, bytes: [UInt8])] {
        var result: [String: (ino: UInt64, bytes: [UInt8])] = [:]
        guard let walker = FileManager.default.enumerator(atPath: root) else { return result }
        for case let name as String in walker {
            let path = root + "/" + name
            let attributes = try FileManager.default.attributesOfItem(atPath: path)
            guard attributes[.type] as? FileAttributeType == .typeRegular else { continue }
            let ino = (attributes[.systemFileNumber] as? NSNumber)?.uint64Value ?? 0
            result[name] = (ino, [UInt8](try Data(contentsOf: URL(fileURLWithPath: path))))
        }
        return result
    }
}

/// A replay of a faultfs log into the file-system states a power cut could leave (one directory).
struct CrashModel {
    enum Operation {
        case open(ino: UInt64, created: Bool, truncate: Bool, name: String)
        case write(ino: UInt64, offset: Int, bytes: [UInt8])
        case truncate(ino: UInt64, length: Int)
        case fsync(ino: UInt64)
        case rename(from: String, to: String)
        case unlink(name: String)
    }

    struct State: Hashable {
        var files: [String: [UInt8]]
        var cut: Int
        var variant: String
        var description: String { "after op \(cut) (\(variant)), files \(files.mapValues(\.count))" }
        static func == (a: State, b: State) -> Bool { a.files == b.files }
        func hash(into hasher: inout Hasher) { hasher.combine(files) }
    }

    var operations: [Operation] = []
    /// Directories under the root by inode ("" is the root); an fsync of one makes its entries durable.
    var directoryInodes: [UInt64: String] = [:]
    /// Files present (and synced) before the recording, by relative name: (inode, contents).
    var initialFiles: [String: (ino: UInt64, bytes: [UInt8])] = [:]

    /// `initial`: files that existed under the root before the recorded run (made durable with `sync`).
    init(log: String, directory: String, initial: [String: (ino: UInt64, bytes: [UInt8])] = [:]) throws {
        initialFiles = initial
        let text = try String(contentsOfFile: log, encoding: .utf8)
        let data = [UInt8](try Data(contentsOf: URL(fileURLWithPath: log + ".data")))
        let lines = text.split(separator: "\n", omittingEmptySubsequences: false).map(String.init)
        let prefix = directory.hasSuffix("/") ? directory : directory + "/"
        func name(_ path: String) -> String? { path.hasPrefix(prefix) ? String(path.dropFirst(prefix.count)) : nil }
        var index = 0
        while index < lines.count {
            let line = lines[index]
            index += 1
            let fields = line.split(separator: " ", maxSplits: 4).map(String.init)
            guard let kind = fields.first else { continue }
            switch kind {
            case "open":
                let path = fields[4]
                let ino = UInt64(fields[1]) ?? 0
                if path == directory || path + "/" == prefix { directoryInodes[ino] = ""; continue }
                guard let n = name(path) else { continue }
                var isDirectory: ObjCBool = false
                if FileManager.default.fileExists(atPath: path, isDirectory: &isDirectory), isDirectory.boolValue {
                    directoryInodes[ino] = n
                    continue
                }
                operations.append(.open(ino: ino, created: fields[2] == "1", truncate: fields[3] == "1", name: n))
            case "write":
                let offset = Int(fields[2])!, length = Int(fields[3])!, at = Int(fields[4])!
                operations.append(.write(ino: UInt64(fields[1])!, offset: offset, bytes: Array(data[at..<(at + length)])))
            case "trunc":
                operations.append(.truncate(ino: UInt64(fields[1])!, length: Int(fields[2])!))
            case "falloc":
                // KEEP_SIZE reservations do not change contents; a size-changing one would extend with zeros.
                let mode = Int(fields[2])!, offset = Int(fields[3])!, length = Int(fields[4])!
                if mode & 1 == 0 { operations.append(.write(ino: UInt64(fields[1])!, offset: offset + length, bytes: [])) }
            case "fsync":
                operations.append(.fsync(ino: UInt64(fields[1])!))
            case "rename":
                let from = lines[index], to = lines[index + 1]
                index += 2
                if let f = name(from), let t = name(to) { operations.append(.rename(from: f, to: t)) }
            case "unlink":
                if let n = name(fields[1...].joined(separator: " ")) { operations.append(.unlink(name: n)) }
            default: continue
            }
        }
    }

    private struct FileState {
        var durable: [UInt8] = []
        var pending: [Operation] = []
        var current: [UInt8] = []
    }

    private static func apply(_ op: Operation, to bytes: inout [UInt8]) {
        switch op {
        case .write(_, let offset, let data):
            if bytes.count < offset + data.count { bytes += [UInt8](repeating: 0, count: offset + data.count - bytes.count) }
            bytes.replaceSubrange(offset..<(offset + data.count), with: data)
        case .truncate(_, let length):
            if length < bytes.count { bytes.removeSubrange(length...) } else { bytes += [UInt8](repeating: 0, count: length - bytes.count) }
        default: break
        }
    }

    /// Every file by name once all the recorded operations are applied: what the recorded run left, if the
    /// recording saw all of its writes.
    func replayedFiles() -> [String: [UInt8]] {
        guard let end = crashStates(everyOp: false, writeStride: Int.max, keepingFinal: true).last else { return [:] }
        return end.files
    }

    /// The distinct crash states at the chosen cut points (each op boundary around a non-write op, every
    /// `writeStride`-th write, and the end; every boundary when `everyOp`).
    /// - Parameter keepingFinal: Ends the list with the state after the last operation, names as done and all
    ///   written, even when an equal state came earlier (``replayedFiles()``).
    func crashStates(everyOp: Bool, writeStride: Int, keepingFinal: Bool = false) -> [State] {
        var files: [UInt64: FileState] = [:]
        var volatileNames: [String: UInt64] = [:]
        var durableNames: [String: UInt64] = [:]
        for (name, file) in initialFiles {
            files[file.ino] = FileState(durable: file.bytes, pending: [], current: file.bytes)
            volatileNames[name] = file.ino
            durableNames[name] = file.ino
        }
        func parent(_ name: String) -> String {
            guard let slash = name.lastIndex(of: "/") else { return "" }
            return String(name[..<slash])
        }
        var states: [State] = []
        var seen = Set<State>()
        var writes = 0
        func snapshot(_ cut: Int) {
            for (nsName, names) in [("names durable", durableNames), ("names as done", volatileNames)] {
                for keep in ["synced only", "half of unsynced", "all written"] {
                    var out: [String: [UInt8]] = [:]
                    for (name, ino) in names {
                        guard let file = files[ino] else { out[name] = []; continue }
                        switch keep {
                        case "synced only": out[name] = file.durable
                        case "all written": out[name] = file.current
                        default:
                            var bytes = file.durable
                            for op in file.pending.prefix(file.pending.count / 2) { Self.apply(op, to: &bytes) }
                            out[name] = bytes
                        }
                    }
                    let state = State(files: out, cut: cut, variant: "\(nsName), \(keep)")
                    if seen.insert(state).inserted { states.append(state) }
                }
            }
        }
        snapshot(0)
        for (index, op) in operations.enumerated() {
            var isWrite = false
            switch op {
            case .write, .truncate: break
            default: if !everyOp { snapshot(index) }
            }
            switch op {
            case .open(let ino, let created, let truncate, let name):
                if created || files[ino] == nil || volatileNames[name] != ino { files[ino] = FileState() }
                volatileNames[name] = ino
                if truncate, var file = files[ino] {
                    let t = Operation.truncate(ino: ino, length: 0)
                    file.pending.append(t)
                    Self.apply(t, to: &file.current)
                    files[ino] = file
                }
            case .write(let ino, _, _), .truncate(let ino, _):
                isWrite = true
                writes += 1
                var file = files[ino] ?? FileState()
                file.pending.append(op)
                Self.apply(op, to: &file.current)
                files[ino] = file
            case .fsync(let ino):
                if let dir = directoryInodes[ino] {
                    durableNames = durableNames.filter { parent($0.key) != dir }
                    for (name, inode) in volatileNames where parent(name) == dir { durableNames[name] = inode }
                } else if var file = files[ino] {
                    file.durable = file.current
                    file.pending = []
                    files[ino] = file
                }
            case .rename(let from, let to):
                if let ino = volatileNames.removeValue(forKey: from) { volatileNames[to] = ino }
            case .unlink(let name):
                volatileNames.removeValue(forKey: name)
            }
            if everyOp || !isWrite || writes % writeStride == 0 || index == operations.count - 1 {
                snapshot(index + 1)
            }
        }
        if keepingFinal {
            states.append(State(
                files: volatileNames.mapValues { files[$0]?.current ?? [] }, cut: operations.count,
                variant: "names as done, all written"))
        }
        return states
    }
}
