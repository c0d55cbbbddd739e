// libFuzzer harness for aria2 JSON-RPC request decoding (Sources/DownloadKitRPC/JSONRPC.swift and
// JSONValue.swift, which need only Foundation), compiled by Scripts/fuzz.sh into the one fuzz binary.
// The whole input is a request body. Properties: decoding never traps; bodies over the size limit and
// nesting over the depth limit are refused before parsing; every decoded call's params re-serialise to
// JSON that decodes to the same values (the serializer the responses use is faithful); every error
// object is one of the typed codes (-32700, -32600). Each decoded call's params also go through the
// caller-number checks and list arithmetic of `tellWaiting`/`changePosition` (RPCParams, Aria2Window, in
// JSONRPC.swift): never a trap, indices inside the list, an out-of-range number names its parameter.

import Foundation

let limits = RPCLimits(maxBytes: 4096, maxDepth: 16, maxBatch: 8)

func checkRoundTrip(_ value: JSONValue) {
    let text = value.serialized
    guard let again = try? JSONDecoder().decode(JSONValue.self, from: Data(text.utf8)) else {
        check(false, "serialized value does not parse: \(text)")
        return
    }
    check(again.serialized == text, "round trip changed \(text) into \(again.serialized)")
}

/// The numbers of `tellWaiting(offset, num)` and `changePosition(gid, pos, how)` taken from any params.
func checkNumbers(_ params: [JSONValue]) {
    let p = RPCParams(params)
    for count in [0, 1, 2, 7] {
        do throws(RPCError) {
            let offset = try p.int(0, "offset", in: RPCParams.signedRange)
            let num = try p.int(1, "num", in: RPCParams.signedRange)
            let indices = Aria2Window.indices(offset: offset, num: num, count: count)
            check(indices.allSatisfy { (0..<count).contains($0) }, "window \(offset) \(num) left a list of \(count)")
            check(indices.count <= max(0, num), "window longer than num")
            let position = Aria2Window.position(offset, from: .current, current: max(0, count - 1), count: count)
            check(count == 0 ? position == 0 : (0..<count).contains(position), "position \(position) outside \(count)")
        } catch {
            check(error.code == 1 && (error.message.contains("wrong type") || error.message.contains("out of range")),
                  "unexpected number error \(error)")
        }
    }
}

func checkCall(_ call: Result<RPCRequest, RPCFailure>) {
    switch call {
    case .success(let request):
        checkNumbers(request.params)
        checkRoundTrip(request.id)
        checkRoundTrip(.array(request.params))
        checkRoundTrip(RPCResponse.success(id: request.id, result: .array(request.params)))
    case .failure(let failure):
        check([-32700, -32600].contains(failure.error.code), "unexpected code \(failure.error)")
        checkRoundTrip(RPCResponse.failure(id: failure.id, error: failure.error))
    }
}

/// One input (Fuzz/FuzzMain.swift calls it when the binary runs as `fuzz-rpcrequest`).
func fuzzRPCRequest(_ data: UnsafePointer<UInt8>, _ size: Int) -> Int32 {
    let body = Data(bytes: data, count: size)
    let depth = RPCDecoder.nestingDepth(body)
    switch RPCDecoder.decode(body, limits: limits) {
    case .single(let call):
        if depth > limits.maxDepth { check(call == .failure(RPCFailure(id: .null, error: .tooDeep(16))), "deep body decoded") }
        checkCall(call)
    case .batch(let calls):
        check(depth <= limits.maxDepth && calls.count <= limits.maxBatch, "batch past the bounds")
        calls.forEach(checkCall)
    }
    return 0
}
