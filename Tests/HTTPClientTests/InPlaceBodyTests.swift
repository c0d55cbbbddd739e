import Foundation
import HTTPClient
import HTTPWire
import Testing
import TestOrigin
import TestThreads

/// `.receiveInPlace`: a `Content-Length` body is read straight into the receiver's windows, never through
/// the receive buffer (the engine's small-body gather, issue #18); other framings fall back to the body
/// callback.
@Suite(.offPool) struct InPlaceBodyTests {
    /// Holds a body of up to `capacity` bytes; each window is at most `step` bytes.
    final class Receiver: BodyReceiver {
        let storage: UnsafeMutableRawBufferPointer
        let step: Int
        var filled = 0
        var reads = 0
        var limitsSeen: [Int] = []
        var failAfter: Int?

        init(capacity: Int, step: Int) {
            storage = .allocate(byteCount: capacity, alignment: 64)
            self.step = step
        }

        deinit { storage.deallocate() }

        func window(limit: Int) -> UnsafeMutableRawBufferPointer {
            limitsSeen.append(limit)
            let count = min(limit, step, storage.count - filled)
            return UnsafeMutableRawBufferPointer(rebasing: storage[filled..<filled + count])
        }

        func received(_ count: Int) throws {
            filled += count
            reads += 1
            if let failAfter, filled >= failAfter { throw CancellationError() }
        }
    }

    /// Runs one exchange the way the engine does: bytes that came with the head go to `onBody` and are
    /// copied to the front of the receiver's storage, the rest are received in place after them.
    func fetch(_ url: String, into receiver: Receiver, client: DKHTTPClient? = nil) throws -> (
        streamed: Int, summary: ExchangeSummary
    ) {
        let client = try client ?? DKHTTPClient()
        var streamed = 0
        let summary = try client.execute(
            DKHTTPRequest(url: try HTTPURL(url)),
            onHead: { _ in .receiveInPlace(InPlaceBody(receiver)) },
            onBody: { bytes in
                let target = UnsafeMutableRawBufferPointer(rebasing: receiver.storage[receiver.filled...])
                target.copyMemory(from: bytes)
                receiver.filled += bytes.count
                streamed += bytes.count
            })
        return (streamed, summary)
    }

    @Test func aContentLengthBodyIsReceivedIntoTheWindowsInOrder() throws {
        let origin = try FaultOrigin()
        let size = 300_000
        origin.serve("/p", .resource(Resource(size: Int64(size), seed: 94)))
        let client = try DKHTTPClient()
        let receiver = Receiver(capacity: size, step: 7_000)
        let result = try fetch(origin.url("/p"), into: receiver, client: client)
        #expect(result.streamed < 4096, "only the bytes read with the head went through the body callback")
        #expect(receiver.reads >= (size - 4096) / 7_000, "the rest came in windows of at most 7,000 bytes")
        #expect(receiver.filled == size)
        #expect(result.summary.bodyBytes == Int64(size))
        #expect(result.summary.connectionKeptAlive)
        // Each window was asked for with the bytes the body still owed, never more.
        let owed = receiver.limitsSeen
        #expect(owed.first.map { $0 == size - result.streamed } == true)
        #expect(zip(owed, owed.dropFirst()).allSatisfy { $0 > $1 })
        #expect(
            TestPattern.firstMismatch(in: UnsafeRawBufferPointer(receiver.storage), offset: 0, seed: 94) == nil)
        // The connection ended exactly at the body's end: the next exchange reuses it.
        let second = Receiver(capacity: size, step: 1 << 20)
        let again = try fetch(origin.url("/p"), into: second, client: client)
        #expect(again.summary.connectionReused)
        #expect(second.filled == size)
    }

    /// A receiver out of room (an empty window) is not a failure: the rest of the body arrives through the
    /// body callback, in order.
    @Test func aReceiverOutOfRoomHandsTheRestToTheBodyCallback() throws {
        let origin = try FaultOrigin()
        let size = 200_000
        origin.serve("/r", .resource(Resource(size: Int64(size), seed: 98)))
        let receiver = Receiver(capacity: 50_000, step: 1 << 20)
        var streamed: [UInt8] = []
        var streamedBeforeInPlace = 0
        let summary = try DKHTTPClient().execute(
            DKHTTPRequest(url: try HTTPURL(origin.url("/r"))),
            onHead: { _ in .receiveInPlace(InPlaceBody(receiver)) },
            onBody: { bytes in
                if receiver.reads == 0 { streamedBeforeInPlace += bytes.count }
                streamed.append(contentsOf: bytes)
            })
        #expect(summary.bodyBytes == Int64(size))
        #expect(receiver.reads > 0)
        // What came with the head, then the receiver's 50,000 bytes, then the rest through the callback.
        let head = Array(streamed[..<streamedBeforeInPlace])
        let whole = head + Array(UnsafeRawBufferPointer(rebasing: receiver.storage[..<receiver.filled]))
            + Array(streamed[streamedBeforeInPlace...])
        #expect(receiver.filled == 50_000)
        #expect(whole.count == size)
        #expect(whole.withUnsafeBytes { TestPattern.firstMismatch(in: $0, offset: 0, seed: 98) } == nil)
    }

    @Test func chunkedBodiesFallBackToTheBodyCallback() throws {
        let origin = try FaultOrigin()
        origin.serve("/c", .resource(Resource(size: 100_000, seed: 95, chunked: true)))
        let receiver = Receiver(capacity: 100_000, step: 1 << 20)
        let result = try fetch(origin.url("/c"), into: receiver)
        #expect(receiver.reads == 0)
        #expect(result.streamed == 100_000)
        #expect(
            TestPattern.firstMismatch(in: UnsafeRawBufferPointer(receiver.storage), offset: 0, seed: 95) == nil)
    }

    @Test func aBodyCutShortIsATruncationErrorWithEveryByteBeforeTheCutReceived() throws {
        let origin = try FaultOrigin()
        let size = 1 << 20
        origin.serve("/t", .resource(Resource(size: Int64(size), seed: 96, faults: [.closeAfter(bytes: 200_000, times: 1)])))
        let receiver = Receiver(capacity: size, step: 1 << 20)
        #expect(throws: WireError.self) { _ = try fetch(origin.url("/t"), into: receiver) }
        #expect(receiver.filled == 200_000)
        #expect(
            TestPattern.firstMismatch(in: UnsafeRawBufferPointer(rebasing: receiver.storage[..<receiver.filled]), offset: 0, seed: 96) == nil)
    }

    @Test func aReceiverThatThrowsEndsTheExchangeWithItsError() throws {
        let origin = try FaultOrigin()
        origin.serve("/f", .resource(Resource(size: 500_000, seed: 97)))
        let receiver = Receiver(capacity: 500_000, step: 10_000)
        receiver.failAfter = 50_000
        #expect(throws: CancellationError.self) { _ = try fetch(origin.url("/f"), into: receiver) }
        #expect(receiver.filled >= 50_000 && receiver.filled < 500_000)
    }
}
