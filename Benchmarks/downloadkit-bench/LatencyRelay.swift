import Foundation
import TestOrigin

/// `Scripts/latency-relay.py` running in front of a local port: every byte in either direction is
/// delayed by a fixed time, a stand-in for a real path's round trip (this VM has no netem).
struct LatencyRelay {
    let port: Int
    private let process: ChildProcess

    /// Starts the relay on a free port and waits until it accepts connections.
    init(target: Int, oneWayMilliseconds: Int, logPath: String) throws {
        let script =
            (((#filePath as NSString).deletingLastPathComponent as NSString).deletingLastPathComponent as NSString)
            .deletingLastPathComponent + "/Scripts/latency-relay.py"
        guard FileManager.default.fileExists(atPath: script) else {
            throw BenchError("\(script) not found (the segmented-rtt scenario runs from a source checkout)")
        }
        guard let python = ProcessRunner.findExecutable("python3") else {
            throw BenchError("python3 is not installed: run Scripts/install-deps.sh --bench (as root)")
        }
        guard let free = try FreePort.allocate().first else { throw BenchError("no free port for the latency relay") }
        port = free
        process = try ChildProcess(python, [script, "\(port)", "\(target)", "\(oneWayMilliseconds)"], outputPath: logPath)
        let deadline = Date().addingTimeInterval(10)
        while !FreePort.acceptsConnections(port: port) {
            guard process.isRunning, Date() < deadline else {
                process.terminate(grace: 1)
                throw BenchError("the latency relay did not start (log: \(logPath))")
            }
            usleep(20_000)
        }
    }

    func stop() { process.terminate(grace: 2) }
}
