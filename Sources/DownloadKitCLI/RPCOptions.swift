import ArgumentParser
import DownloadKit
import DownloadKitManager
import DownloadKitRPC
import Foundation

/// aria2-compatible JSON-RPC options shared by `downloadkit rpc` and `downloadkit daemon`.
struct RPCOptions: ParsableArguments {
    @Option(name: .customLong("rpc-listen"), help: "Serve aria2 JSON-RPC at HOST:PORT (POST and WebSocket at /jsonrpc), e.g. 127.0.0.1:6800. Off by default.")
    var rpcListen: String?

    @Flag(name: .customLong("rpc-listen-all"), help: "Allow a non-loopback --rpc-listen address (all interfaces when only a port is given).")
    var rpcListenAll = false

    @Option(name: .customLong("rpc-secret"), help: "Require `token:TOKEN` as every call's first parameter (aria2's --rpc-secret). Masked in the process list once parsed, visible before that: prefer --rpc-secret-file or $DOWNLOADKIT_RPC_SECRET.")
    var rpcSecret: String?

    @Option(name: .customLong("rpc-secret-file"), help: "Read the secret from the first line of PATH (mode 600: a file other users may read is refused).")
    var rpcSecretFile: String?

    @Flag(name: .customLong("rpc-allow-origin-all"), help: "Add `Access-Control-Allow-Origin: *` to answers, so web pages of any origin read them (they still need the secret). Off by default.")
    var rpcAllowOriginAll = false

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
        if let rpcSecret, rpcSecret.isEmpty { throw ValidationError("--rpc-secret must not be empty") }
        if rpcSecret != nil && rpcSecretFile != nil {
            throw ValidationError("--rpc-secret and --rpc-secret-file both give the secret; use one")
        }
        if let endpoint = try endpoint {
            let secret = try secret()  // a bad --rpc-secret-file is refused here, before any state is opened
            do {
                _ = try Aria2RPCServer.checkedAddress(host: endpoint.host, listenAll: rpcListenAll, hasSecret: secret != nil)
            } catch {
                throw ValidationError(error.description)
            }
        }
    }

    /// The secret: --rpc-secret, else the first line of --rpc-secret-file, else $DOWNLOADKIT_RPC_SECRET
    /// (an empty variable is none), else none.
    func secret(environment: [String: String] = ProcessInfo.processInfo.environment) throws(RPCSecretFileError) -> String? {
        if let rpcSecret { return rpcSecret }
        if let rpcSecretFile { return try RPCSecret.read(fromFile: rpcSecretFile) }
        if let value = environment[RPCSecret.environmentVariable], !value.isEmpty { return value }
        return nil
    }

    /// The server these options ask for, or nil when --rpc-listen is absent.
    func makeServer(manager: DownloadManager) throws -> Aria2RPCServer? {
        guard let endpoint = try endpoint else { return nil }
        return try Aria2RPCServer(
            manager: manager, host: endpoint.host, port: endpoint.port, secret: try secret(), listenAll: rpcListenAll,
            allowOriginAll: rpcAllowOriginAll)
    }
}
