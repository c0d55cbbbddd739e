import DownloadKit
import DownloadKitManager
import Foundation
import Testing

@testable import DownloadKitRPC

@Suite("RPC decoding and aria2 mapping")
struct RPCCodecTests {
    private func decode(_ text: String, limits: RPCLimits = RPCLimits()) -> RPCMessage {
        RPCDecoder.decode(Data(text.utf8), limits: limits)
    }

    @Test func decodesACallWithIdMethodAndParams() {
        let message = decode(#"{"jsonrpc":"2.0","id":"q","method":"aria2.tellStatus","params":["abc",["gid"]]}"#)
        #expect(
            message
                == .single(.success(RPCRequest(id: .string("q"), method: "aria2.tellStatus", params: [.string("abc"), .array([.string("gid")])]))))
    }

    @Test func notJSONIsAParseErrorWithNullId() {
        for text in ["{bad", "5x", "", "[1,"] {
            #expect(decode(text) == .single(.failure(RPCFailure(id: .null, error: .parseError))), "\(text)")
        }
    }

    @Test func missingIdOrNonStringMethodIsInvalidRequest() {
        #expect(decode(#"{"method":"aria2.getVersion"}"#) == .single(.failure(RPCFailure(id: .null, error: .invalidRequest))))
        #expect(decode(#"{"id":7,"method":5}"#) == .single(.failure(RPCFailure(id: .int(7), error: .invalidRequest))))
        #expect(decode(#"{"id":7,"method":"m","params":{"a":1}}"#) == .single(.failure(RPCFailure(id: .int(7), error: .invalidRequest))))
        #expect(decode("5") == .single(.failure(RPCFailure(id: .null, error: .invalidRequest))))
    }

    @Test func batchesKeepOrderAndEmptyBatchIsEmpty() {
        #expect(decode("[]") == .batch([]))
        let message = decode(#"[{"id":1,"method":"a"},{"id":2}]"#)
        #expect(message == .batch([.success(RPCRequest(id: .int(1), method: "a")), .failure(RPCFailure(id: .int(2), error: .invalidRequest))]))
    }

    @Test func sizeDepthAndBatchBoundsAreTypedErrors() {
        let limits = RPCLimits(maxBytes: 64, maxDepth: 4, maxBatch: 2)
        let big = #"{"id":1,"method":""# + String(repeating: "x", count: 100) + #""}"#
        #expect(decode(big, limits: limits) == .single(.failure(RPCFailure(id: .null, error: .tooLarge(64)))))
        #expect(decode("[[[[[1]]]]]", limits: limits) == .single(.failure(RPCFailure(id: .null, error: .tooDeep(4)))))
        #expect(decode(#"{"id":"[[[[[[","method":"m"}"#, limits: limits) == .single(.success(RPCRequest(id: .string("[[[[[["), method: "m"))))
        #expect(decode("[1,2,3]", limits: limits) == .single(.failure(RPCFailure(id: .null, error: .batchTooLong(2)))))
        let deep = String(repeating: "[", count: 100_000) + String(repeating: "]", count: 100_000)
        #expect(decode(deep, limits: RPCLimits(maxBytes: 1 << 20)) == .single(.failure(RPCFailure(id: .null, error: .tooDeep(64)))))
    }

    @Test func serializesSortedEscapedJSON() {
        let value = JSONValue.object(["b": .array([.int(1), .bool(true), .null]), "a": .string("q\"\\\n\u{1}é")])
        #expect(value.serialized == #"{"a":"q\"\\\n\u0001é","b":[1,true,null]}"#)
        let roundTrip = try? JSONDecoder().decode(JSONValue.self, from: value.serializedData)
        #expect(roundTrip == value)
    }

    /// An integral number decodes to one case however it is written, so a response echoes an id that
    /// decodes to the same value again (fuzz-rpcrequest found `.double(1.2222222222222222e16)` serialised as
    /// `1.2222222222222222e+16`, which decodes as an `.int`).
    @Test func integralNumbersDecodeAsIntegersHoweverWritten() throws {
        func value(_ text: String) throws -> JSONValue { try JSONDecoder().decode(JSONValue.self, from: Data(text.utf8)) }
        #expect(try value("9651348852630791.958804") == .int(9_651_348_852_630_792))
        #expect(try value("9.651348852630792e+15") == .int(9_651_348_852_630_792))
        #expect(try value("1.0") == .int(1))
        #expect(try value("0.5") == .double(0.5))
        #expect(try value("9.3e18") == .double(9.3e18))
        for text in ["9651348852630791.958804", "-6732537715556186360.67082", "1.5e300", "-0", "0.1", "[1e2,2.50]"] {
            let once = try value(text)
            #expect(try value(once.serialized) == once, "\(text) → \(once.serialized)")
        }
    }

    @Test func gidsAreSixteenHexDigitsAndStable() {
        let uuid = "0f1e2d3c-4b5a-4978-8695-a4b3c2d1e0f9"
        #expect(Aria2GID.gid(forTaskID: uuid) == "0f1e2d3c4b5a4978")
        let other = Aria2GID.gid(forTaskID: "not-a-uuid")
        #expect(other.count == 16 && Aria2GID.isValid(other))
        #expect(other == Aria2GID.gid(forTaskID: "not-a-uuid"))
        #expect(other != Aria2GID.gid(forTaskID: "not-a-uuie"))
        #expect(!Aria2GID.isValid("xyz") && !Aria2GID.isValid("0f1e2d3c4b5a497g"))
    }

    @Test func statusNamesFollowAria2() {
        let expected: [ManagedTaskState: String] = [
            .waiting: "waiting", .running: "active", .paused: "paused", .completed: "complete", .failed: "error",
            .cancelled: "removed",
        ]
        for (state, name) in expected { #expect(Aria2Status.name(state) == name) }
    }

    @Test func httpStatusesAreAria2s() {
        #expect(RPCReply(body: Data(), error: nil).httpStatus == 200)
        #expect(RPCReply(body: Data(), error: .unauthorized).httpStatus == 400)
        #expect(RPCReply(body: Data(), error: .invalidRequest).httpStatus == 400)
        #expect(RPCReply(body: Data(), error: .parseError).httpStatus == 500)
        #expect(RPCError(code: -32601, message: "x").httpStatus == 404)
    }

    @Test func stopNotificationOnlyForARunningDownload() {
        #expect(Aria2Status.notification(from: .running, to: .cancelled) == "aria2.onDownloadStop")
        for previous: ManagedTaskState? in [.waiting, .paused, nil] {
            #expect(Aria2Status.notification(from: previous, to: .cancelled) == nil)
        }
        #expect(Aria2Status.notification(from: .waiting, to: .running) == "aria2.onDownloadStart")
        #expect(Aria2Status.notification(from: .running, to: .waiting) == nil)
    }

    @Test func changeUriCountsAndPlacesAsAria2() {
        let one = Aria2URIList.change(["http://a/"], deleting: ["http://a/", "http://x/"], adding: ["http://b/"], at: nil)
        #expect(one == Aria2URIList.Change(uris: ["http://b/"], deletedCount: 1, addedCount: 1))
        let placed = Aria2URIList.change(["http://a/", "http://a/"], deleting: ["http://a/"], adding: ["http://b/", "http://c/"], at: 0)
        #expect(placed.uris == ["http://b/", "http://c/", "http://a/"] && placed.deletedCount == 1)
        #expect(Aria2URIList.change(["http://a/"], deleting: [], adding: ["http://b/"], at: Int(Int32.max)).uris == ["http://a/", "http://b/"])
        #expect(Aria2URIList.isUsable("https://example.com/f") && !Aria2URIList.isUsable("notauri") && !Aria2URIList.isUsable("ftp://h/f"))
    }

    @Test func optionsMapToManagerSettings() throws {
        let options = try Aria2TaskOptions([
            "dir": .string("/d"), "out": .string("f.iso"), "header": .array([.string("X-A: 1"), .string("Cookie: a=b")]),
            "checksum": .string("sha-256=" + String(repeating: "ab", count: 32)), "max-download-limit": .string("10K"),
            "split": .string("4"), "max-tries": .string("0"), "pause": .string("true"), "unknown-option": .string("x"),
        ])
        #expect(options.destination(defaultDirectory: "/x") == .file("/d/f.iso"))
        #expect(options.headers == ["X-A": "1", "Cookie": "a=b"])
        #expect(options.checksum?.algorithm == .sha256)
        #expect(options.maxDownloadLimit == 10_240 && options.split == 4 && options.maxTries == 0 && options.pause)
        #expect(try Aria2TaskOptions([:]).destination(defaultDirectory: "/x") == .directory("/x", naming: .fromResponse))
        for (name, value) in [("max-download-limit", "zz"), ("checksum", "sha-256=00"), ("split", "0"), ("out", "../x"), ("header", "nocolon")] {
            #expect(throws: RPCError.aria2("We encountered a problem while processing the option '--\(name)'.")) {
                try Aria2TaskOptions([name: .string(value)])
            }
        }
        #expect(Aria2Size.parse("2M") == 2 << 20 && Aria2Size.parse("0") == 0 && Aria2Size.parse("-1") == nil)
        #expect(Aria2Size.parse("99999999999999999G") == nil)
    }

    @Test func secretComparisonIsExact() {
        #expect(Aria2RPCService.constantTimeEqual(Array("s3".utf8), Array("s3".utf8)))
        #expect(!Aria2RPCService.constantTimeEqual(Array("s3".utf8), Array("s4".utf8)))
        #expect(!Aria2RPCService.constantTimeEqual(Array("s3".utf8), Array("s3x".utf8)))
        #expect(!Aria2RPCService.constantTimeEqual([], Array("s".utf8)))
    }

    @Test func loopbackOnlyUnlessListenAll() {
        #expect(Aria2RPCServer.isLoopback("127.0.0.1") && Aria2RPCServer.isLoopback("127.5.0.9") && Aria2RPCServer.isLoopback("::1"))
        #expect(!Aria2RPCServer.isLoopback("0.0.0.0") && !Aria2RPCServer.isLoopback("10.0.0.1") && !Aria2RPCServer.isLoopback("127.0.0.256"))
    }
}
