package broadcast

import _ "example.com/bad/wire"
