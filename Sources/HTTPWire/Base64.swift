extension WireError.Code {
    /// Text is not canonical, padded base64 (RFC 4648 §4).
    public static let malformedBase64 = WireError.Code("malformedBase64")
}

/// Base64 with the standard alphabet and `=` padding (RFC 4648 §4).
///
/// Decoding is strict: only the 64 alphabet characters, padding to a multiple of four, padding only
/// at the end, no whitespace, and the unused low bits of the last symbol must be zero (RFC 4648 §3.5),
/// so every accepted text is exactly `encode(decode(text))`.
public enum Base64 {
    private static let alphabet: [UInt8] = Array(
        "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/".utf8)

    /// Maps an ASCII byte to its 6-bit value, or 0xFF when it is not in the alphabet.
    private static let reverse: [UInt8] = {
        var table = [UInt8](repeating: 0xFF, count: 256)
        for (value, symbol) in alphabet.enumerated() { table[Int(symbol)] = UInt8(value) }
        return table
    }()

    /// Encodes bytes as padded base64.
    /// - Parameter bytes: The bytes to encode.
    /// - Returns: The base64 text, its length a multiple of four.
    public static func encode(_ bytes: some Collection<UInt8>) -> String {
        let input = Array(bytes)
        var output: [UInt8] = []
        output.reserveCapacity((input.count + 2) / 3 * 4)
        var index = 0
        while index + 3 <= input.count {
            let group = UInt32(input[index]) << 16 | UInt32(input[index + 1]) << 8 | UInt32(input[index + 2])
            output.append(alphabet[Int(group >> 18 & 0x3F)])
            output.append(alphabet[Int(group >> 12 & 0x3F)])
            output.append(alphabet[Int(group >> 6 & 0x3F)])
            output.append(alphabet[Int(group & 0x3F)])
            index += 3
        }
        switch input.count - index {
        case 1:
            let group = UInt32(input[index]) << 16
            output.append(alphabet[Int(group >> 18 & 0x3F)])
            output.append(alphabet[Int(group >> 12 & 0x3F)])
            output.append(UInt8(ascii: "="))
            output.append(UInt8(ascii: "="))
        case 2:
            let group = UInt32(input[index]) << 16 | UInt32(input[index + 1]) << 8
            output.append(alphabet[Int(group >> 18 & 0x3F)])
            output.append(alphabet[Int(group >> 12 & 0x3F)])
            output.append(alphabet[Int(group >> 6 & 0x3F)])
            output.append(UInt8(ascii: "="))
        default:
            break
        }
        return String(decoding: output, as: UTF8.self)
    }

    /// Encodes the UTF-8 bytes of a string as padded base64.
    public static func encode(_ string: String) -> String { encode(Array(string.utf8)) }

    /// Decodes strict, padded base64.
    /// - Parameter text: The base64 text.
    /// - Returns: The decoded bytes.
    /// - Throws: ``WireError`` with code ``WireError/Code/malformedBase64`` and the offending offset.
    public static func decode(_ text: String) throws(WireError) -> [UInt8] {
        let input = Array(text.utf8)
        guard input.count % 4 == 0 else {
            throw WireError(.malformedBase64, offset: input.count, "length \(input.count) is not a multiple of 4")
        }
        var output: [UInt8] = []
        output.reserveCapacity(input.count / 4 * 3)
        var index = 0
        while index < input.count {
            let isLastGroup = index + 4 == input.count
            var values: [UInt32] = [0, 0, 0, 0]
            var padding = 0
            for position in 0..<4 {
                let byte = input[index + position]
                if byte == UInt8(ascii: "=") {
                    // Padding may only fill the last one or two positions of the final group (RFC 4648 §4).
                    guard isLastGroup, position >= 2 else {
                        throw WireError(.malformedBase64, offset: index + position, "padding in the middle of the text")
                    }
                    padding += 1
                    continue
                }
                guard padding == 0 else {
                    throw WireError(.malformedBase64, offset: index + position, "data after padding")
                }
                let value = reverse[Int(byte)]
                guard value != 0xFF else {
                    throw WireError(
                        .malformedBase64, offset: index + position, "byte \(byte) is not in the base64 alphabet")
                }
                values[position] = UInt32(value)
            }
            let group = values[0] << 18 | values[1] << 12 | values[2] << 6 | values[3]
            output.append(UInt8(truncatingIfNeeded: group >> 16))
            if padding < 2 { output.append(UInt8(truncatingIfNeeded: group >> 8)) }
            if padding < 1 { output.append(UInt8(truncatingIfNeeded: group)) }
            // Non-zero pad bits would let two texts decode to the same bytes (RFC 4648 §3.5).
            if (padding == 1 && group & 0xFF != 0) || (padding == 2 && group & 0xFFFF != 0) {
                throw WireError(.malformedBase64, offset: index + 3 - padding, "non-zero bits in the padded symbol")
            }
            index += 4
        }
        return output
    }
}
