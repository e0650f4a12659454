#include <accel/accel.h>
int main(void){return 0;}
