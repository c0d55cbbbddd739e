import Foundation

/// A JSON-RPC error object (`{"code": …, "message": …}`), with aria2's codes: -32700 for text that is
/// not JSON, -32600 for JSON that is not a request, 1 for every method-level failure (aria2 uses 1 for
/// unknown methods, bad parameters, unknown GIDs and a wrong secret alike).
public struct RPCError: Error, Sendable, Hashable, CustomStringConvertible {
    public var code: Int
    public var message: String

    public init(code: Int, message: String) {
        self.code = code
        self.message = message
    }

    /// `-32700 Parse error.`: the body is not JSON (aria2's exact text).
    public static let parseError = RPCError(code: -32700, message: "Parse error.")
    /// `-32600 Invalid Request.`: JSON, but not a request object (aria2's exact text).
    public static let invalidRequest = RPCError(code: -32600, message: "Invalid Request.")
    /// A method-level failure, code 1 as aria2 answers.
    public static func aria2(_ message: String) -> RPCError { RPCError(code: 1, message: message) }
    /// The body is larger than ``RPCLimits/maxBytes``.
    public static func tooLarge(_ limit: Int) -> RPCError {
        RPCError(code: -32600, message: "Invalid Request: the request exceeds \(limit) bytes.")
    }
    /// Arrays and objects nest deeper than ``RPCLimits/maxDepth``.
    public static func tooDeep(_ limit: Int) -> RPCError {
        RPCError(code: -32600, message: "Invalid Request: nesting deeper than \(limit) levels.")
    }
    /// More calls in one batch than ``RPCLimits/maxBatch``.
    public static func batchTooLong(_ limit: Int) -> RPCError {
        RPCError(code: -32600, message: "Invalid Request: more than \(limit) calls in one batch.")
    }

    /// The error object as JSON.
    public var json: JSONValue { .object(["code": .int(Int64(code)), "message": .string(message)]) }
    public var description: String { "\(code) \(message)" }
}

/// Bounds on what one JSON-RPC message may be.
public struct RPCLimits: Sendable, Hashable {
    /// Largest body in bytes; default 2 MiB (aria2's `--rpc-max-request-size` default).
    public var maxBytes: Int
    /// Deepest nesting of arrays and objects; default 64 (aria2 calls need 4).
    public var maxDepth: Int
    /// Most calls in one batch or `system.multicall`; default 1000.
    public var maxBatch: Int

    public init(maxBytes: Int = 2 << 20, maxDepth: Int = 64, maxBatch: Int = 1000) {
        self.maxBytes = maxBytes
        self.maxDepth = maxDepth
        self.maxBatch = maxBatch
    }
}

/// One decoded call: `{"jsonrpc": "2.0", "id": …, "method": "aria2.…", "params": [...]}`.
public struct RPCRequest: Sendable, Hashable {
    /// The caller's id, echoed in the response (any JSON value; aria2 requires one).
    public var id: JSONValue
    public var method: String
    /// Positional parameters (absent means none).
    public var params: [JSONValue]

    public init(id: JSONValue, method: String, params: [JSONValue] = []) {
        self.id = id
        self.method = method
        self.params = params
    }
}

/// A call that could not be decoded: the id to answer with (null when unknown) and the error.
public struct RPCFailure: Error, Sendable, Hashable {
    public var id: JSONValue
    public var error: RPCError
}

/// What one HTTP body or WebSocket text frame held.
public enum RPCMessage: Sendable, Hashable {
    /// One call (or the failure to read it).
    case single(Result<RPCRequest, RPCFailure>)
    /// A batch; answered with an array in the same order (an empty batch gets `[]`, as from aria2).
    case batch([Result<RPCRequest, RPCFailure>])
}

/// Decodes JSON-RPC 2.0 messages within ``RPCLimits``. Pure: bytes in, values out, never throws or traps.
public enum RPCDecoder {
    /// Decodes one message.
    public static func decode(_ data: Data, limits: RPCLimits = RPCLimits()) -> RPCMessage {
        guard data.count <= limits.maxBytes else {
            return .single(.failure(RPCFailure(id: .null, error: .tooLarge(limits.maxBytes))))
        }
        guard nestingDepth(data) <= limits.maxDepth else {
            return .single(.failure(RPCFailure(id: .null, error: .tooDeep(limits.maxDepth))))
        }
        let value: JSONValue
        do {
            value = try JSONDecoder().decode(JSONValue.self, from: data)
        } catch {
            return .single(.failure(RPCFailure(id: .null, error: .parseError)))
        }
        if case .array(let calls) = value {
            guard calls.count <= limits.maxBatch else {
                return .single(.failure(RPCFailure(id: .null, error: .batchTooLong(limits.maxBatch))))
            }
            return .batch(calls.map(request))
        }
        return .single(request(value))
    }

    /// Reads one call object (aria2's rules: an id is required, the method is a string, params an array).
    public static func request(_ value: JSONValue) -> Result<RPCRequest, RPCFailure> {
        guard let object = value.objectValue, let id = object["id"] else {
            return .failure(RPCFailure(id: .null, error: .invalidRequest))
        }
        guard let method = object["method"]?.stringValue else {
            return .failure(RPCFailure(id: id, error: .invalidRequest))
        }
        switch object["params"] {
        case nil, .null?:
            return .success(RPCRequest(id: id, method: method))
        case .array(let params)?:
            return .success(RPCRequest(id: id, method: method, params: params))
        default:
            return .failure(RPCFailure(id: id, error: .invalidRequest))
        }
    }

    /// The deepest nesting of `[`/`{` outside strings (checked before parsing, so parsing never recurses
    /// deeper than the limit).
    public static func nestingDepth(_ data: Data) -> Int {
        var depth = 0
        var deepest = 0
        var inString = false
        var escaped = false
        for byte in data {
            if inString {
                if escaped {
                    escaped = false
                } else if byte == UInt8(ascii: "\\") {
                    escaped = true
                } else if byte == UInt8(ascii: "\"") {
                    inString = false
                }
                continue
            }
            switch byte {
            case UInt8(ascii: "\""): inString = true
            case UInt8(ascii: "["), UInt8(ascii: "{"):
                depth += 1
                deepest = max(deepest, depth)
            case UInt8(ascii: "]"), UInt8(ascii: "}"): depth = max(0, depth - 1)
            default: break
            }
        }
        return deepest
    }
}

/// Builds response and notification objects.
public enum RPCResponse {
    /// `{"id": id, "jsonrpc": "2.0", "result": result}`.
    public static func success(id: JSONValue, result: JSONValue) -> JSONValue {
        .object(["id": id, "jsonrpc": .string("2.0"), "result": result])
    }

    /// `{"id": id, "jsonrpc": "2.0", "error": {"code": …, "message": …}}`.
    public static func failure(id: JSONValue, error: RPCError) -> JSONValue {
        .object(["id": id, "jsonrpc": .string("2.0"), "error": error.json])
    }

    /// A server-to-client notification: `{"jsonrpc": "2.0", "method": m, "params": [{"gid": g}]}`.
    public static func notification(method: String, gid: String) -> JSONValue {
        .object(["jsonrpc": .string("2.0"), "method": .string(method), "params": .array([.object(["gid": .string(gid)])])])
    }
}
