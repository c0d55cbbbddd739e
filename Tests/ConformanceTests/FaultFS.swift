import Foundation
import Testing
import TestOrigin

/// The `faultfs` LD_PRELOAD shim (Tests/Support/faultfs/faultfs.c, issue #20) and the real `downloadkit`
/// executable run under it: the engine is not modified, the shim counts, fails or records the file
/// operations of one directory. The shim is compiled once per test process with `-shared -fPIC` into a
/// temporary directory, by the Swift toolchain's own `clang` (always beside `swift`), else `cc` or `gcc`.
enum FaultFS {
    /// The compiled shim, or the compiler's complaint.
    static let library: Result<String, FaultFSError> = {
        let source = URL(fileURLWithPath: #filePath).deletingLastPathComponent()
            .appendingPathComponent("../Support/faultfs/faultfs.c").standardized.path
        let out = NSTemporaryDirectory() + "faultfs-\(getpid())-\(UUID().uuidString.prefix(8)).so"
        let log = out + ".log"
        guard let compiler = ["clang", "cc", "gcc"].lazy.compactMap(ProcessRunner.findExecutable).first else {
            return .failure(FaultFSError(message: "no C compiler (clang, cc, gcc) on PATH to build \(source)"))
        }
        do {
            let child = try ChildProcess(compiler, ["-shared", "-fPIC", "-O1", "-o", out, source, "-ldl"], outputPath: log)
            let status = child.waitForExit(timeout: 120)
            let output = (try? String(contentsOfFile: log, encoding: .utf8)) ?? ""
            guard status == 0, FileManager.default.fileExists(atPath: out) else {
                return .failure(FaultFSError(message: "\(compiler) failed for \(source): \(output)"))
            }
            return .success(out)
        } catch {
            return .failure(FaultFSError(message: "cc: \(error)"))
        }
    }()

    /// How the Nth operation fails.
    enum Mode: String, CaseIterable, Sendable {
        case eio = "EIO", enospc = "ENOSPC", eintr = "EINTR", short = "SHORT"
    }

    struct Run {
        var exitCode: Int32
        var signalled: Bool
        var output: String
        /// The run did not finish within its timeout and was killed.
        var timedOut = false
        /// Operations the shim counted; whether the fault was injected.
        var operations: Int
        var injected: Bool
    }

    /// Runs `downloadkit arguments` (or `program arguments`) with the shim watching `directory` (no fault
    /// when `failAt` is 0; `log` records every operation for the power-cut replay).
    static func run(
        _ arguments: [String], program: String? = nil, watching directory: String, failAt: Int = 0, mode: Mode = .eio,
        log: String? = nil, timeout: Double = 60
    ) throws -> Run {
        let library = try Self.library.get()
        let executable = try program ?? #require(CLITests.executable, "downloadkit executable not found next to the tests")
        let countFile = NSTemporaryDirectory() + "faultfs-run-\(UUID().uuidString).count"
        defer { try? FileManager.default.removeItem(atPath: countFile) }
        var environment = [
            "LD_PRELOAD=\(library)", "FAULTFS_DIR=\(directory)", "FAULTFS_FAIL_AT=\(failAt)",
            "FAULTFS_MODE=\(mode.rawValue)", "FAULTFS_COUNT=\(countFile)", "SWIFT_BACKTRACE=enable=no",
        ]
        if let log { environment.append("FAULTFS_LOG=\(log)") }
        var run = try spawn(
            executable, arguments, environment: environment, timeout: timeout,
            what: "downloadkit \(arguments) under faultfs (N=\(failAt) \(mode))")
        guard !run.timedOut else { return run }
        let counted = ((try? String(contentsOfFile: countFile, encoding: .utf8)) ?? "").split(separator: "\n")
        run.operations = counted.first.flatMap { Int($0) } ?? 0
        run.injected = counted.contains("injected")
        return run
    }

    /// Runs `downloadkit arguments` without the shim (or with `environment`, `NAME=value` items, through env(1)).
    static func plainRun(_ arguments: [String], environment: [String] = [], timeout: Double = 60) throws -> Run {
        let executable = try #require(CLITests.executable, "downloadkit executable not found next to the tests")
        return try spawn(executable, arguments, environment: environment, timeout: timeout, what: "downloadkit \(arguments)")
    }

    /// Runs `program arguments` (through env(1) when `environment` has `NAME=value` items) and waits at most
    /// `timeout` seconds: a run past it is killed, recorded as an issue naming `what`, and returned `timedOut`.
    private static func spawn(
        _ program: String, _ arguments: [String], environment: [String], timeout: Double, what: String
    ) throws -> Run {
        let outFile = NSTemporaryDirectory() + "faultfs-run-\(UUID().uuidString).out"
        defer { try? FileManager.default.removeItem(atPath: outFile) }
        let child = environment.isEmpty
            ? try ChildProcess(program, arguments, outputPath: outFile)
            : try ChildProcess("/usr/bin/env", environment + [program] + arguments, outputPath: outFile)
        guard let status = child.waitForExit(timeout: timeout) else {
            child.terminate(grace: 1)
            Issue.record("\(what) did not finish within \(timeout) s")
            return Run(exitCode: -1, signalled: true, output: "", timedOut: true, operations: 0, injected: false)
        }
        let output = (try? String(contentsOfFile: outFile, encoding: .utf8)) ?? ""
        return Run(
            exitCode: WaitStatus(status).exitCode, signalled: WaitStatus(status).signal != nil, output: output, operations: 0,
            injected: false)
    }

    /// Runs `downloadkit arguments` as the first run after a power cut: on a new boot. The shim serves a
    /// fresh `/proc/sys/kernel/random/boot_id` (FAULTFS_BOOT_ID) and watches nothing else. A power cut always
    /// comes with a reboot, and the engine trusts the unsynced journal of a segmented download (and a temp
    /// file's length) only on the boot that wrote them: rerun on the recording's boot, a state where the cut
    /// kept journal records but lost the data they describe was resumed from the records, and the tests
    /// reported the engine as completing a wrong file.
    static func rebootedRun(_ arguments: [String], timeout: Double = 60) throws -> Run {
        let library = try Self.library.get()
        return try plainRun(
            arguments, environment: ["LD_PRELOAD=\(library)", "FAULTFS_BOOT_ID=\(UUID().uuidString.lowercased())"],
            timeout: timeout)
    }

    /// Ends a sweep of runs early: when the test's time limit has cancelled it (Swift Testing cancels the test's
    /// task; a loop that does not look goes on through every remaining run), or once runs have hung
    /// `maxHangs` times (each costs its whole timeout, and one is already a failure to read). Without it a
    /// sweep whose runs all hung would hold the suite for hours: 157 power-cut states at 60 s each.
    struct SweepGuard {
        var hangs = 0
        var maxHangs = 2

        /// Why the sweep should stop after `runs`, or nil to go on.
        mutating func stopReason(after runs: Run?...) -> String? {
            hangs += runs.compactMap { $0 }.filter(\.timedOut).count
            if hangs >= maxHangs { return "stopped after \(hangs) runs that did not finish in time" }
            if Task.isCancelled { return "stopped: the test's time limit cancelled it" }
            return nil
        }
    }

    /// The failure points to try out of `count` operations: every one up to `all`, then every
    /// `stride`-th, always including the last. `DOWNLOADKIT_FAULTFS_ALL=1` tries every one.
    static func points(count: Int, all: Int, stride: Int) -> [Int] {
        guard count > 0 else { return [] }
        if ProcessInfo.processInfo.environment["DOWNLOADKIT_FAULTFS_ALL"] == "1" { return Array(1...count) }
        var points = Array(1...min(count, all))
        if count > all {
            points += Swift.stride(from: all + stride, through: count, by: stride)
            if points.last != count { points.append(count) }
        }
        return points
    }
}

struct FaultFSError: Error, CustomStringConvertible {
    var message: String
    var description: String { message }
}
