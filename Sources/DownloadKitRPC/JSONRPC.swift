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

    /// aria2's answer to a missing or wrong `token:` (after the delay ``RPCLimits/badTokenDelay``).
    public static let unauthorized = RPCError.aria2("Unauthorized")
    /// A caller number outside what the parameter accepts (never trapped on, never clamped silently).
    public static func outOfRange(_ name: String, at index: Int, _ value: Int64, _ range: ClosedRange<Int64>) -> RPCError {
        .aria2("The parameter at \(index) (\(name)) is out of range: \(value) is not in \(range.lowerBound)...\(range.upperBound).")
    }
    /// The answers of one message would exceed ``RPCLimits/maxResponseBytes``.
    public static func responseTooLarge(_ limit: Int) -> RPCError {
        .aria2("The response would exceed \(limit) bytes; ask for fewer items (smaller num, fewer calls).")
    }

    /// The HTTP status aria2 answers a POST whose only response carries this error: 400 for a
    /// method-level failure (code 1: `Unauthorized`, unknown GID or method, bad parameters) and for
    /// `-32600`, 404 for `-32601`, 500 for anything else (`-32700 Parse error.`). A batch is 200 whatever
    /// its responses hold; so is a success.
    public var httpStatus: Int {
        switch code {
        case 1, -32600: 400
        case -32601: 404
        default: 500
        }
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
    /// Most bytes of answers to one message (a batch, its `system.multicall`s and their results together):
    /// calls past it are answered with ``RPCError/responseTooLarge(_:)`` without being run; default 8 MiB (aria2 front ends
    /// ask for a few hundred KiB; the 10 × 100 `tellWaiting [0,1000]` asked for 377 MB).
    public var maxResponseBytes: Int
    /// What a wrong or missing `token:` costs its caller before the `Unauthorized` answer; default 1 s.
    public var badTokenDelay: Duration

    public init(
        maxBytes: Int = 2 << 20, maxDepth: Int = 64, maxBatch: Int = 1000, maxResponseBytes: Int = 8 << 20,
        badTokenDelay: Duration = .seconds(1)
    ) {
        self.maxBytes = maxBytes
        self.maxDepth = maxDepth
        self.maxBatch = maxBatch
        self.maxResponseBytes = maxResponseBytes
        self.badTokenDelay = badTokenDelay
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

/// One message's answer: the body, and the HTTP status aria2 sends it with.
public struct RPCReply: Sendable, Hashable {
    /// The response text: one response object, or an array for a batch.
    public var body: Data
    /// The error of a message that was a single call and failed; nil for a success or a batch.
    public var error: RPCError?

    /// A reply with this body; `error` when it is a single call's failure.
    public init(body: Data, error: RPCError?) {
        self.body = body
        self.error = error
    }

    /// aria2's status: 200 for a success or any batch, else ``RPCError/httpStatus`` of the error (400
    /// for `Unauthorized`, an unknown GID or method, `-32600`; 500 for `-32700 Parse error.`). Over
    /// WebSocket there is no status: the frames are the same.
    public var httpStatus: Int { error?.httpStatus ?? 200 }
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

    /// The response object of a call that ended with `outcome`.
    public static func object(id: JSONValue, _ outcome: Result<JSONValue, RPCError>) -> JSONValue {
        switch outcome {
        case .success(let result): success(id: id, result: result)
        case .failure(let error): failure(id: id, error: error)
        }
    }

    /// A server-to-client notification: `{"jsonrpc": "2.0", "method": m, "params": [{"gid": g}]}`.
    public static func notification(method: String, gid: String) -> JSONValue {
        .object(["jsonrpc": .string("2.0"), "method": .string(method), "params": .array([.object(["gid": .string(gid)])])])
    }
}

/// Positional parameters with aria2's type errors (`The parameter at N has wrong type.`) and range checks
/// on every caller number (``RPCError/outOfRange(_:at:_:_:)`` names the parameter). Foundation only, so
/// the RPC fuzz target reaches it.
public struct RPCParams: Sendable {
    /// The largest magnitude of a caller offset, count or position: `Int32.max`. Sums and differences of
    /// two such numbers and a list length can never overflow `Int`.
    public static let numberBound = Int64(Int32.max)
    /// The range offsets and positions may take.
    public static let signedRange = -numberBound...numberBound
    /// The range counts may take.
    public static let countRange: ClosedRange<Int64> = 0...numberBound

    public var values: [JSONValue]
    public init(_ values: [JSONValue]) { self.values = values }

    private func wrongType(_ index: Int) -> RPCError { .aria2("The parameter at \(index) has wrong type.") }

    public func string(_ index: Int) throws(RPCError) -> String {
        guard index < values.count, let text = values[index].stringValue else { throw wrongType(index) }
        return text
    }

    /// An integer in `range` (a wrong type or a number outside it is an error naming `name`).
    public func int(_ index: Int, _ name: String, in range: ClosedRange<Int64>) throws(RPCError) -> Int {
        guard index < values.count else { throw wrongType(index) }
        guard let number = values[index].intValue else {
            if case .double(let d) = values[index], d.rounded() == d {
                // An integral number beyond 64 bits: out of range, not a wrong type.
                throw .outOfRange(name, at: index, d < 0 ? Int64.min : Int64.max, range)
            }
            throw wrongType(index)
        }
        guard range.contains(number) else { throw .outOfRange(name, at: index, number, range) }
        return Int(number)
    }

    /// An optional integer in `range` (absent or null gives nil).
    public func optionalInt(_ index: Int, _ name: String, in range: ClosedRange<Int64>) throws(RPCError) -> Int? {
        guard index < values.count, values[index] != .null else { return nil }
        return try int(index, name, in: range)
    }

    public func array(_ index: Int) throws(RPCError) -> [JSONValue] {
        guard index < values.count, let array = values[index].arrayValue else { throw wrongType(index) }
        return array
    }

    public func object(_ index: Int) -> [String: JSONValue]? {
        index < values.count ? values[index].objectValue : nil
    }

    /// An optional `keys` array of strings.
    public func keys(_ index: Int) throws(RPCError) -> [String]? {
        guard index < values.count, values[index] != .null else { return nil }
        guard let array = values[index].arrayValue else { throw wrongType(index) }
        return array.compactMap(\.stringValue)
    }
}

/// The list arithmetic of `tellWaiting`/`tellStopped` and `changePosition`, on range-checked numbers
/// (``RPCParams/numberBound``) so that it cannot overflow. Pure; fuzzed with the decoder.
public enum Aria2Window {
    /// The indices `tellWaiting`/`tellStopped(offset, num)` list from a list of `count` items, in order:
    /// from `offset` forwards, or for a negative offset from `count + offset` backwards (aria2's rule).
    public static func indices(offset: Int, num: Int, count: Int) -> [Int] {
        guard num > 0, count > 0 else { return [] }
        if offset >= 0 {
            guard offset < count else { return [] }
            return Array(offset..<(offset + min(num, count - offset)))
        }
        let start = count + offset
        guard start >= 0 else { return [] }
        return Array(stride(from: start, through: max(0, start - num + 1), by: -1))
    }

    /// How `changePosition` counts.
    public enum Origin: String, Sendable {
        case set = "POS_SET", current = "POS_CUR", end = "POS_END"
    }

    /// The index `changePosition(pos, how)` moves the item at `current` to in a line of `count` items,
    /// clamped into the line as aria2 clamps.
    public static func position(_ offset: Int, from origin: Origin, current: Int, count: Int) -> Int {
        let target =
            switch origin {
            case .set: offset
            case .current: current + offset
            case .end: count - 1 + offset
            }
        return min(max(0, target), max(0, count - 1))
    }
}
