// libFuzzer harness for the session socket protocol (downloadkitd, docs/DAEMON.md): framing and
// message decoding.
//
// Compiled by Scripts/fuzz.sh into the one fuzz binary with Sources/DownloadKitSession/
// {Framing,SessionProtocol}.swift. Input layout: byte 0 picks the split size used to
// feed the rest to a FrameDecoder (1–64 bytes at a time, or all at once); the rest is a byte stream
// as a client would send it. Properties: feeding the same stream in pieces or at once gives the same
// frames and the same verdict; a declared length over the limit is refused before it is buffered; every
// frame decodes to a message or a typed `malformedMessage`; every decoded message encodes and decodes
// to itself; nothing ever crashes.
import Foundation

let fuzzLimit = 4096

func frames(of bytes: [UInt8], split: Int) -> (frames: [[UInt8]], tooLarge: Int?, buffered: Int) {
    var decoder = FrameDecoder(maxFrameBytes: fuzzLimit)
    var frames: [[UInt8]] = []
    var offset = 0
    while offset < bytes.count {
        let end = min(bytes.count, offset + split)
        decoder.append(bytes[offset..<end])
        offset = end
        decoding: while true {
            switch decoder.next() {
            case .frame(let body): frames.append(body)
            case .needMore: break decoding
            case .tooLarge(let declared):
                check(declared > fuzzLimit, "refused a \(declared)-byte frame under the limit")
                return (frames, declared, decoder.bufferedBytes)
            }
        }
    }
    check(decoder.bufferedBytes < 4 + fuzzLimit, "buffered \(decoder.bufferedBytes) bytes past one frame")
    return (frames, nil, decoder.bufferedBytes)
}

/// One input (Fuzz/FuzzMain.swift calls it when the binary runs as `fuzz-sessionprotocol`).
func fuzzSessionProtocol(_ data: UnsafePointer<UInt8>, _ size: Int) -> Int32 {
    guard size >= 1 else { return 0 }
    let stream = Array(UnsafeBufferPointer(start: data + 1, count: size - 1))
    let split = data[0] == 0 ? max(1, stream.count) : Int(data[0] % 64) + 1
    let whole = frames(of: stream, split: max(1, stream.count))
    let pieces = frames(of: stream, split: split)
    check(whole.frames == pieces.frames, "frames depend on how the stream was split")
    check(whole.tooLarge == pieces.tooLarge, "the size verdict depends on the split")
    for body in whole.frames + [stream] {
        do {
            let message = try SessionCodec.decodeClient(body)
            let again = try SessionCodec.decodeClient(SessionCodec.encode(message))
            if case .hello = message.request {
                check(again.request == message.request, "hello round trip")
            } else {
                check(again == message, "client message round trip: \(message)")
            }
        } catch {
            check(error.code == .malformedMessage, "client decode error \(error.code)")
        }
        do {
            let message = try SessionCodec.decodeServer(body)
            check(try SessionCodec.decodeServer(SessionCodec.encode(message)) == message, "server message round trip")
        } catch {
            check(error.code == .malformedMessage, "server decode error \(error.code)")
        }
    }
    return 0
}
