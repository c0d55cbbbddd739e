import DownloadKit
import DownloadKitManager
import DownloadKitRPC
import Foundation
import TestOrigin
import Testing

/// One JSON-RPC POST through curl (a real client process), off the cooperative pool.
func rpcPost(port: Int, _ body: String) async throws -> JSONValue {
    let result = try await offloaded {
        try ProcessRunner.run(
            "/usr/bin/curl", ["-s", "--max-time", "30", "-H", "Content-Type: application/json", "--data-binary", body,
                              "http://127.0.0.1:\(port)/jsonrpc"])
    }
    return try JSONDecoder().decode(JSONValue.self, from: Data(result.output.utf8))
}

/// A call object's text.
func rpcCall(_ method: String, _ params: [JSONValue], id: Int = 1) -> String {
    JSONValue.object(["jsonrpc": .string("2.0"), "id": .int(Int64(id)), "method": .string(method), "params": .array(params)]).serialized
}

/// A value's shape: leaves become their type names, arrays the shape of their first element.
func shape(_ value: JSONValue, ignoring ignored: Set<String> = []) -> JSONValue {
    switch value {
    case .object(let members):
        var out: [String: JSONValue] = [:]
        for (key, member) in members where !ignored.contains(key) { out[key] = shape(member, ignoring: ignored) }
        return .object(out)
    case .array(let items): return .array(items.first.map { [shape($0, ignoring: ignored)] } ?? [])
    default: return .string(value.typeName)
    }
}

/// An aria2c with RPC on a private port and its own directory, no config file; stopped by `stop()`.
final class Aria2Process: Sendable {
    let port: Int
    let process: ChildProcess

    init(directory: String, secret: String?) throws {
        port = try FreePort.allocate()[0]
        var arguments = [
            "--no-conf", "--enable-rpc", "--rpc-listen-port=\(port)", "--dir=\(directory)/aria2",
            "--save-session=\(directory)/aria2.session", "--max-concurrent-downloads=5", "--quiet=true",
        ]
        if let secret { arguments.append("--rpc-secret=\(secret)") }
        process = try ChildProcess("/usr/bin/aria2c", arguments, outputPath: directory + "/aria2.log")
    }

    func waitUntilListening() throws {
        for _ in 0..<200 where !FreePort.acceptsConnections(port: port) {
            guard process.isRunning else { throw CocoaError(.fileReadUnknown) }
            usleep(25_000)
        }
    }

    func stop() { process.terminate() }
}

/// Our server on a DownloadManager in a scratch directory, running in a task; `stop()` ends both.
final class DownloadKitRPCPeer: Sendable {
    let manager: DownloadManager
    let server: Aria2RPCServer
    let port: Int
    let runner: Task<Void, any Error>

    init(directory: String, secret: String?, allowOriginAll: Bool = false, limits: RPCLimits = RPCLimits()) async throws {
        port = try FreePort.allocate()[0]
        manager = try await DownloadManager(
            stateDirectory: directory + "/state",
            configuration: DownloadManagerConfiguration(maxConcurrentDownloads: 5, defaultDownloadDirectory: directory + "/dk"))
        server = try Aria2RPCServer(
            manager: manager, host: "127.0.0.1", port: port, secret: secret, allowOriginAll: allowOriginAll, limits: limits)
        let server = self.server
        runner = Task { try await server.run() }
        await server.waitUntilReady()
    }

    /// Shuts the server down gracefully and waits for it; a server still running 30 s later is a failure
    /// (recorded, naming it) and is then cancelled, so that a listener that never stops fails its test
    /// instead of holding the whole run.
    func stop() async {
        await server.shutdown()
        let runner = self.runner
        let stopped = await withTaskGroup(of: Bool.self) { group in
            group.addTask {
                _ = try? await runner.value
                return true
            }
            group.addTask {
                try? await Task.sleep(for: .seconds(30))
                return false
            }
            let first = await group.next() ?? false
            if !first { runner.cancel() }
            group.cancelAll()
            return first
        }
        if !stopped { Issue.record("the RPC server on port \(port) still ran 30 s after shutdown(); cancelled") }
        await manager.close()
    }
}
