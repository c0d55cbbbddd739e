import ArgumentParser
import DownloadKit
import DownloadKitManager
import DownloadKitRPC

/// aria2-compatible JSON-RPC options shared by `downloadkit rpc` and `downloadkit daemon`.
struct RPCOptions: ParsableArguments {
    @Option(name: .customLong("rpc-listen"), help: "Serve aria2 JSON-RPC at HOST:PORT (POST and WebSocket at /jsonrpc), e.g. 127.0.0.1:6800. Off by default.")
    var rpcListen: String?

    @Flag(name: .customLong("rpc-listen-all"), help: "Allow a non-loopback --rpc-listen address (all interfaces when only a port is given).")
    var rpcListenAll = false

    @Option(name: .customLong("rpc-secret"), help: "Require `token:TOKEN` as every call's first parameter (aria2's --rpc-secret).")
    var rpcSecret: String?

    /// The parsed `HOST:PORT` (a bare `PORT` means 127.0.0.1, or all interfaces with --rpc-listen-all).
    var endpoint: (host: String?, port: Int)? {
        get throws {
            guard let rpcListen else { return nil }
            var host: String?
            var portText = Substring(rpcListen)
            if let colon = rpcListen.lastIndex(of: ":") {
                host = String(rpcListen[..<colon]).trimmingCharacters(in: ["[", "]"])
                portText = rpcListen[rpcListen.index(after: colon)...]
            }
            guard let port = Int(portText), (1...65535).contains(port) else {
                throw ValidationError("--rpc-listen must be HOST:PORT with a port from 1 to 65535, got \(rpcListen)")
            }
            if let host, host.isEmpty { return (nil, port) }
            return (host, port)
        }
    }

    func validate() throws {
        if let endpoint = try endpoint, let host = endpoint.host, !rpcListenAll, !Aria2RPCServer.isLoopback(host) {
            throw ValidationError("--rpc-listen \(host) is not a loopback address; add --rpc-listen-all to allow it")
        }
        if let rpcSecret, rpcSecret.isEmpty { throw ValidationError("--rpc-secret must not be empty") }
    }

    /// The server these options ask for, or nil when --rpc-listen is absent.
    func makeServer(manager: DownloadManager) throws -> Aria2RPCServer? {
        guard let endpoint = try endpoint else { return nil }
        return try Aria2RPCServer(
            manager: manager, host: endpoint.host, port: endpoint.port, secret: rpcSecret, listenAll: rpcListenAll)
    }
}
